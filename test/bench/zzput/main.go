package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/test/testenv"
)

func main() {
	conc := flag.Int("c", 1000, "")
	size := flag.Int("size", 2000, "")
	dur := flag.Duration("d", 10*time.Second, "")
	flag.Parse()
	ctx := context.Background()
	err := testenv.WithMinIOBucket(ctx, func(_ *testenv.MinIO, cfg blobstore.Config) error {
		store, err := blobstore.Open(ctx, cfg)
		if err != nil {
			return err
		}
		for _, c := range []int{1, 16, *conc} {
			var mu sync.Mutex
			var lat []time.Duration
			var wg sync.WaitGroup
			end := time.Now().Add(*dur)
			data := bytes.Repeat([]byte("x"), *size)
			for g := range c {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; time.Now().Before(end); i++ {
						t := time.Now()
						if _, err := store.Put(ctx, fmt.Sprintf("p/%d/%d/%d", c, g, i), bytes.NewReader(data), int64(len(data)), blobstore.PutOptions{}); err != nil {
							fmt.Println(err)
							return
						}
						mu.Lock()
						lat = append(lat, time.Since(t))
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			slices.Sort(lat)
			fmt.Printf("conc %d: %d puts, %.0f/s, p50 %s p99 %s\n", c, len(lat), float64(len(lat))/dur.Seconds(), lat[len(lat)/2], lat[len(lat)*99/100])
		}
		return nil
	})
	fmt.Println(err)
}

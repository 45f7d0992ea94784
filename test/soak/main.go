// Command soak runs Porter as its users do, for a bounded time, while it
// breaks the parts it depends on, and checks all along that nothing is lost.
//
// It starts a server of its own on the local cluster (own namespace, own
// PostgreSQL server so it can restart it, own bucket) and drives it with the
// real fly: a git-triggered chain of three jobs with hooks, in_parallel and
// serial jobs, a time-triggered job, manual triggers, `fly execute -i/-o`,
// intercepts and aborts. At random intervals it injects one fault: the
// server SIGKILLed and restarted, PostgreSQL, MinIO, the kube-apiserver or
// the kubelet restarted, a running step pod deleted. At the end it waits for
// every build to finish and prints a table of checks (also as JSON).
//
//	go run ./test/soak [-duration 30m] [-json soak.json] [-faults all]
//
// SOAK_DURATION sets the default duration. It exits 1 if a check fails.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	def := 30 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "soak: SOAK_DURATION %q: %v\n", v, err)
			os.Exit(2)
		}
		def = d
	}
	var cfg config
	flag.DurationVar(&cfg.Duration, "duration", def, "how long the load and the faults run (then the soak drains and checks)")
	flag.StringVar(&cfg.JSONPath, "json", "soak.json", "where to write the results as JSON")
	faults := flag.String("faults", "all", "comma-separated faults to inject: "+strings.Join(allFaults, ",")+", all, or none")
	flag.DurationVar(&cfg.FaultEvery, "fault-every", 0, "mean time between faults (default: duration/6, between 30s and 3m)")
	flag.IntVar(&cfg.KeptCap, "kept-cap", 50, "the most kept (finished) step pods allowed at any time")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "random seed (0: from the clock; printed)")
	flag.Parse()
	var err error
	if cfg.Faults, err = parseFaults(*faults); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.FaultEvery == 0 {
		cfg.FaultEvery = min(max(cfg.Duration/6, 30*time.Second), 3*time.Minute)
	}
	cfg.rand = rand.New(rand.NewPCG(cfg.Seed, cfg.Seed>>1|1))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

type config struct {
	Duration   time.Duration
	JSONPath   string
	Faults     []string
	FaultEvery time.Duration
	KeptCap    int
	Seed       uint64
	rand       *rand.Rand
}

func parseFaults(s string) ([]string, error) {
	switch s {
	case "all":
		return allFaults, nil
	case "none", "":
		return nil, nil
	}
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		found := false
		for _, known := range allFaults {
			found = found || known == f
		}
		if !found {
			return nil, fmt.Errorf("unknown fault %q (known: %s)", f, strings.Join(allFaults, ", "))
		}
		out = append(out, f)
	}
	return out, nil
}

package cli

import "testing"

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0:               "0 B",
		1023:            "1023 B",
		1024:            "1.0 KiB",
		12_897_484:      "12.3 MiB",
		5 << 30:         "5.0 GiB",
		3<<40 + 512<<30: "3.5 TiB",
	} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

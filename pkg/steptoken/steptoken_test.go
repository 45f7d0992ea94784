package steptoken

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	good, err := k.Mint("step-1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Verify(good, "step-1"); err != nil {
		t.Fatalf("valid token refused: %v", err)
	}

	otherKey, _ := NewKey()
	other, _ := NewKeyring(otherKey)
	forged, _ := other.Mint("step-1", time.Hour)
	expired, _ := k.Mint("step-1", -time.Minute)
	payload, sig, _ := strings.Cut(good, ".")
	tampered := strings.ToUpper(payload[:1]) + payload[1:] + "." + sig
	if tampered == good {
		tampered = "x" + good
	}

	for name, tc := range map[string]struct{ token, step, want string }{
		"other step": {good, "step-2", "not \"step-2\""},
		"forged":     {forged, "step-1", "bad signature"},
		"expired":    {expired, "step-1", "expired"},
		"malformed":  {"nonsense", "step-1", "malformed"},
		"tampered":   {tampered, "step-1", "bad signature"},
		"empty":      {"", "step-1", "malformed"},
	} {
		t.Run(name, func(t *testing.T) {
			err := k.Verify(tc.token, tc.step)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Verify = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

func TestShortKeyRefused(t *testing.T) {
	if _, err := NewKeyring([]byte("short")); err == nil {
		t.Fatal("short key accepted")
	}
}

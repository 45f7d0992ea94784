package entrypoint

import "testing"

func TestProcessEnvDropsTheSocketKeepsParamsAndFollowsUser(t *testing.T) {
	env := processEnv([]string{"PATH=/bin", "PORTER_SOCKET=/porter/run/control.sock", "PORTER_VERSION=1.2", "HOME=/root", "A=1"}, []string{"B=2"}, "/home/u", true)
	want := []string{"PATH=/bin", "PORTER_VERSION=1.2", "A=1", "HOME=/home/u", "B=2"}
	if len(env) != len(want) {
		t.Fatalf("env = %v, want %v", env, want)
	}
	for i := range want {
		if env[i] != want[i] {
			t.Fatalf("env = %v, want %v", env, want)
		}
	}
}

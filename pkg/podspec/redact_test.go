package podspec

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The values the sidecar redacts from the journal are credentials
// themselves: they reach the sidecar only through the step's Secret.
func TestRedactValuesTravelInTheSecret(t *testing.T) {
	s := exampleSecrets()
	s.Redact = []string{"cred-one-value", "cred\ntwo"}
	pod, secret, err := Build(exampleAction("redact"), exampleWorker(), s)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := json.Unmarshal(secret.Data[SecretKeyRedact], &got); err != nil || len(got) != 2 || got[0] != "cred-one-value" || got[1] != "cred\ntwo" {
		t.Fatalf("Secret key %s = %q (%v), want the two values", SecretKeyRedact, secret.Data[SecretKeyRedact], err)
	}
	podYAML, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(podYAML), "cred-one-value") {
		t.Errorf("the pod spec shows a value to redact")
	}
	refs := 0
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		for _, e := range c.Env {
			if e.Name != EnvRedact {
				continue
			}
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Key != SecretKeyRedact || e.ValueFrom.SecretKeyRef.Name != secret.Name {
				t.Errorf("%s: %s is not a reference to the Secret's %s key: %+v", c.Name, EnvRedact, SecretKeyRedact, e)
			}
			if c.Name == StepContainerName {
				t.Errorf("the step container gets %s", EnvRedact)
			}
			refs++
		}
	}
	if refs != 1 {
		t.Errorf("%d containers get %s, want the sidecar only", refs, EnvRedact)
	}

	// Nothing to redact: no key, no variable.
	pod, secret, err = Build(exampleAction("plain"), exampleWorker(), exampleSecrets())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := secret.Data[SecretKeyRedact]; ok {
		t.Errorf("Secret has key %s without values", SecretKeyRedact)
	}
	podYAML, _ = yaml.Marshal(pod)
	if strings.Contains(string(podYAML), EnvRedact) {
		t.Errorf("pod has %s without values", EnvRedact)
	}
}

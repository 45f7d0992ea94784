package redteam_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

// shellyPipeline is a pipeline whose resource r is of a type whose image
// has a shell (busybox) and checks every 2 s; source holds a password.
func shellyPipeline(ctx context.Context, name, password string) {
	GinkgoHelper()
	cfg := writeFile(fmt.Sprintf(`resource_types:
- name: shelly
  type: registry-image
  source: {repository: busybox}
resources:
- name: r
  type: shelly
  check_every: 2s
  source: {password: %q}
jobs:
- name: j
  plan:
  - get: r
`, password))
	run(ctx, member, "set-pipeline", "-n", "-p", name, "-c", cfg)
	run(ctx, member, "unpause-pipeline", "-p", name)
	DeferCleanup(func(ctx context.Context) { run(ctx, admin, "destroy-pipeline", "-n", "-p", name) })
}

// versions are the versions fly lists of pipeline/resource.
func versions(ctx context.Context, resource string) string {
	GinkgoHelper()
	var vs []struct {
		Version map[string]string `json:"version"`
	}
	Expect(json.Unmarshal([]byte(run(ctx, admin, "resource-versions", "-r", resource, "--json").Stdout), &vs)).To(Succeed())
	return fmt.Sprint(vs)
}

var _ = Describe("check pods", func() {
	// The attack (issue 28, 1): a team member intercepts one pipeline's
	// check pod, replaces the type's /opt/resource/check there, and
	// captures the next check's request of another pipeline (its
	// source.password) while giving that resource a version they chose.
	// Now check pods are per pipeline, and the intercepted pod is retired
	// before the session opens: no check but those already running ever
	// runs in it again.
	It("never run another pipeline's check, or any new check, in a check pod someone intercepted", func(ctx SpecContext) {
		suffix := strings.ToLower(rand8())
		victim, attacker := "victim-"+suffix, "attacker-"+suffix
		secret := "victim-secret-" + suffix
		shellyPipeline(ctx, victim, secret)
		shellyPipeline(ctx, attacker, "attacker-own")

		// The attacker's resource has been checked (busybox has no check
		// script, so each check errors): its check pod is there.
		var handle string
		Eventually(ctx, func() string {
			for _, c := range containers(ctx, member) {
				if c.Type == "check" && c.PipelineName == attacker && c.StepName == "r" {
					handle = c.ID
				}
			}
			return handle
		}).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).ShouldNot(BeEmpty())
		// And so has the victim's, so that both pods exist when the
		// attacker plants the script (today's main ran both in one).
		Eventually(ctx, func() bool {
			for _, c := range containers(ctx, admin) {
				if c.Type == "check" && c.PipelineName == victim && c.StepName == "r" {
					return true
				}
			}
			return false
		}).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(BeTrue())

		script := `mkdir -p /opt/resource && printf '%s\n' '#!/bin/sh' 'cat > /tmp/captured.$$' 'echo "[{\"ref\":\"evil\"}]"' > /opt/resource/check &&
chmod +x /opt/resource/check && echo planted && sleep 16 && echo captured: && cat /tmp/captured.* 2>/dev/null; echo end`
		res, err := flyAs[member].Exec(ctx, testenv.FlyCmd{Args: []string{"intercept", "--handle", handle, "--", "sh", "-c", script}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Stdout).To(ContainSubstring("planted"), res.String())
		Expect(res.Stdout).To(ContainSubstring("end"), res.String())
		// Eight checks of each pipeline came and went while the script
		// waited: none ran in the pod.
		Expect(res.Stdout).NotTo(ContainSubstring(secret), "the victim's check request reached the intercepted pod")
		Expect(res.Stdout).NotTo(ContainSubstring("attacker-own"), "a new check of the attacker's own pipeline ran in the intercepted pod")
		Expect(versions(ctx, victim+"/r")).NotTo(ContainSubstring("evil"))
		Expect(versions(ctx, attacker+"/r")).NotTo(ContainSubstring("evil"))
		// The server says why the pod takes no more checks.
		Expect(server.Log()).To(ContainSubstring("check pod retired: intercepted"))
	})
})

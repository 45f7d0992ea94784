package pipelines_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

// A server of its own with Vault as the team's credential manager
// (--vault-*): the suite's server reads Kubernetes Secrets, and one server
// has one credential manager. Vault is a real dev server on the node's IP,
// so step pods could reach it too; the ATC, on the host, is what reads it.
var _ = Describe("secrets from Vault", Ordered, func() {
	var (
		vault    *testenv.VaultServer
		fly      *testenv.Fly
		password = rand.Text()
	)
	BeforeAll(func(ctx SpecContext) {
		var err error
		vault, err = testenv.StartVault(ctx, s.env.Cluster["PORTER_CLUSTER_NODE_IP"])
		if errors.Is(err, testenv.ErrNoVault) {
			if os.Getenv("CI") == "" {
				Skip(err.Error())
			}
			Fail(fmt.Sprintf("CI needs the Vault binary: %v", err))
		}
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			Expect(vault.Stop()).To(Succeed())
		})
		Expect(vault.EnableKV(ctx, "concourse", 2)).To(Succeed())

		ns, removeNS, err := s.env.NewWorkerNamespace(ctx, "porter-vault-")
		DeferCleanup(removeNS)
		Expect(err).NotTo(HaveOccurred())
		dsn, drop, err := s.env.NewDatabase(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(drop)
		own, err := s.env.NewATC(testenv.ATCConfig{
			Worker: ns, WorkerName: "vault", Database: dsn,
			LocalUsers: []string{adminUser + ":" + password}, MainTeamUsers: []string{adminUser},
			PodRetention: time.Minute,
			Args: []string{"--porter-image", s.porterImage,
				"--vault-url", vault.Addr, "--vault-client-token", vault.Token, "--vault-shared-path", "shared",
				// The test's Vault is on loopback, which var_sources may not
				// reach unless allowed.
				"--var-source-allowed-networks", "127.0.0.0/8"},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(own.Start(ctx)).To(Succeed())
		DeferCleanup(func() {
			Expect(own.Stop()).To(Succeed())
			GinkgoWriter.Printf("log of the Vault server's ATC at %s:\n%s\n", own.URL(), own.Log())
		})
		fly = testenv.NewFly(s.flyBin, GinkgoT().TempDir(), "porter-vault")
		fly.Log = GinkgoWriter
		res, err := fly.Login(ctx, own.URL(), adminUser, password)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
	})

	It("fills in ((vault-secret)) from the pipeline's path, ((field)) of a team secret and a shared secret, redacted in the build log", func(ctx SpecContext) {
		p := pipelineName("vault")
		secret, user, pw, shared := secretValue("vault"), secretValue("user"), secretValue("pw"), secretValue("shared")
		Expect(vault.PutKV(ctx, "concourse", "main/"+p+"/vault-secret", map[string]any{"value": secret})).To(Succeed())
		// The team's own one is shadowed by the pipeline's.
		Expect(vault.PutKV(ctx, "concourse", "main/vault-secret", map[string]any{"value": "team-level-loses"})).To(Succeed())
		Expect(vault.PutKV(ctx, "concourse", "main/db", map[string]any{"user": user, "password": pw})).To(Succeed())
		Expect(vault.PutKV(ctx, "concourse", "shared/registry", map[string]any{"value": shared})).To(Succeed())
		setPipeline(ctx, fly, p, `
jobs:
- name: show
  plan:
  - task: print
    params: {SECRET: ((vault-secret)), USER: ((db.user)), REG: ((registry))}
    config:
`+busyboxTask("      ", `run: {path: sh, args: [-c, 'echo "secret=$SECRET user=$USER registry=$REG"; echo "secret-length=${#SECRET} user-length=${#USER}"']}`))
		res := succeed(ctx, fly, "trigger-job", "-j", p+"/show", "-w")
		Expect(res.Stdout).To(ContainSubstring("secret=((redacted)) user=((redacted)) registry=((redacted))"))
		// The process had the real values (their lengths), not the redaction.
		Expect(res.Stdout).To(ContainSubstring(fmt.Sprintf("secret-length=%d user-length=%d", len(secret), len(user))))
		for _, v := range []string{secret, user, pw, shared, "team-level-loses"} {
			Expect(res.Output()).NotTo(ContainSubstring(v))
		}
	})

	It("reads a var_source of type vault, its client_token itself from the team's Vault, and names an undefined var", func(ctx SpecContext) {
		p := pipelineName("vault-source")
		value, missing := secretValue("from-source"), varName("missing")
		Expect(vault.PutKV(ctx, "concourse", "main/source-token", map[string]any{"value": vault.Token})).To(Succeed())
		Expect(vault.PutKV(ctx, "secret", "apps/"+p+"/api", map[string]any{"key": value})).To(Succeed())
		setPipeline(ctx, fly, p, `
var_sources:
- name: apps
  type: vault
  config:
    url: `+vault.Addr+`
    client_token: ((source-token))
    path_prefix: /secret
    lookup_templates: ["/apps/{{.Pipeline}}/{{.Secret}}"]
jobs:
- name: show
  plan:
  - task: print
    params: {KEY: ((apps:api.key))}
    config:
`+busyboxTask("      ", `run: {path: sh, args: [-c, 'echo "key=$KEY length=${#KEY}"']}`)+`
- name: undefined
  plan:
  - task: print
    params: {KEY: ((apps:`+missing+`))}
    config:
`+busyboxTask("      ", `run: {path: "true"}`))
		res := succeed(ctx, fly, "trigger-job", "-j", p+"/show", "-w")
		Expect(res.Stdout).To(ContainSubstring(fmt.Sprintf("key=((redacted)) length=%d", len(value))))
		Expect(res.Output()).NotTo(ContainSubstring(value))
		Expect(res.Output()).NotTo(ContainSubstring(vault.Token))

		res = run(ctx, fly, "trigger-job", "-j", p+"/undefined", "-w")
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		Expect(res.Output()).To(ContainSubstring("undefined vars: apps:" + missing))
	})

	It("refuses at set-pipeline a vault var_source with missing or bad fields, naming them", func(ctx SpecContext) {
		path := GinkgoT().TempDir() + "/bad.yml"
		Expect(os.WriteFile(path, []byte(`
var_sources:
- name: v
  type: vault
  config: {url: "ftp://vault", lookup_templates: ["/{{.Team}}/{{.Nope}}/{{.Secret}}"], auth_backend: approle}
jobs:
- name: j
  plan:
  - task: t
    config:
`+busyboxTask("      ", `run: {path: "true"}`)), 0o644)).To(Succeed())
		res := run(ctx, fly, "set-pipeline", "-n", "-p", pipelineName("bad-vault"), "-c", path)
		Expect(res.ExitCode).NotTo(Equal(0), res.String())
		for _, want := range []string{
			"var_sources[0](v): config.client_token is required",
			`var_sources[0](v): config.url "ftp://vault" must be http:// or https://`,
			"var_sources[0](v): config.auth_backend is not supported by this server",
			`var_sources[0](v): config.lookup_templates[0]`,
		} {
			Expect(res.Output()).To(ContainSubstring(want))
		}
	})
})

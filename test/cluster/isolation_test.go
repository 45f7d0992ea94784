package cluster_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/sys/unix"
)

var _ = Describe("the local cluster's network", func() {
	// docs/local-cluster.md: pods reach each other and this host, nothing
	// else. A server on a network this host routes to, as Docker's
	// containers on docker0 are, must refuse them; it did not while the CNI
	// firewall plugin's per-pod ACCEPTs came first in FORWARD.
	It("refuses pods a connection to anything routed beyond the bridge and this host", func(ctx SpecContext) {
		token := randomToken()
		addr := serverBehindVeth(ctx, token)
		// The host reaches it: what stops the pod is the isolation rule.
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/")
		Expect(err).NotTo(HaveOccurred(), "the host reaches the server at %s", addr)
		resp.Body.Close()

		ns := newNamespace(ctx)
		pod := busyboxPod("reach-beyond", fmt.Sprintf("wget -q -O- http://%s/ 2>&1; echo exit=$?", addr))
		createPod(ctx, ns, pod)
		waitForPod(ctx, ns, pod.Name, podFinished)
		out := containerLogs(ctx, ns, pod.Name, "main")
		Expect(out).NotTo(ContainSubstring(token), "the pod reached %s", addr)
		Expect(out).To(ContainSubstring("refused"), "rejected at once, not dropped")
		Expect(out).NotTo(ContainSubstring("exit=0"))
	}, SpecTimeout(specTimeout))
})

// serverBehindVeth serves body over HTTP in a network namespace of its own,
// behind a veth pair whose host end has a TEST-NET-2 /30, and returns the
// server's address. Everything is removed when the spec ends.
func serverBehindVeth(ctx SpecContext, body string) string {
	suffix := randomToken()[:6]
	netns, hostIf := "porter-iso-"+suffix, "ptiso"+suffix
	base := 4 * rand.IntN(64)
	hostIP, nsIP := fmt.Sprintf("198.51.100.%d", base+1), fmt.Sprintf("198.51.100.%d", base+2)
	ip := func(args ...string) {
		out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "ip %s: %s", strings.Join(args, " "), out)
	}
	ip("netns", "add", netns)
	// Deleting the namespace deletes the veth pair with it.
	DeferCleanup(func() { _ = exec.Command("ip", "netns", "del", netns).Run() })
	ip("link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", netns)
	ip("addr", "add", hostIP+"/30", "dev", hostIf)
	ip("link", "set", hostIf, "up")
	ip("-n", netns, "addr", "add", nsIP+"/30", "dev", "eth0")
	ip("-n", netns, "link", "set", "eth0", "up")
	ip("-n", netns, "route", "add", "default", "via", hostIP)

	lis, err := listenInNetns(netns, net.JoinHostPort(nsIP, "8080"))
	Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go srv.Serve(lis) //nolint:errcheck // returns ErrServerClosed at cleanup
	DeferCleanup(srv.Close)
	return lis.Addr().String()
}

// listenInNetns listens on addr in the named network namespace: the socket
// stays in the namespace it was made in, whichever thread uses it later.
func listenInNetns(name, addr string) (net.Listener, error) {
	type result struct {
		lis net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Left locked if this thread's namespace cannot be restored: the
		// thread then ends with the goroutine.
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open("/var/run/netns/" + name)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("enter network namespace %s: %w", name, err)}
			return
		}
		lis, err := net.Listen("tcp", addr)
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{lis, err}
	}()
	r := <-done
	return r.lis, r.err
}

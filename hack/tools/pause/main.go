// Command pause is the pod sandbox process of the local cluster's pause image
// (the cluster cannot pull registry.k8s.io/pause). It holds the pod's namespaces
// open, reaps orphaned children when it is PID 1 of a shared PID namespace, and
// exits 0 on SIGINT or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reapChildren()
	}
}

// reapChildren collects every exited child without blocking, so zombies of a
// shared PID namespace do not pile up.
func reapChildren() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err != nil || pid <= 0 {
			return
		}
	}
}

// Package exec runs a build's plan, as Concourse's atc/exec: the control
// flow (do, in_parallel, hooks, try, timeout, retry) and the steps that do
// work (task, get, put, check, artifacts), each a pod on a worker. It owns
// a running build's state (Build, buildstate.StepRecord, StepState); the server that
// keeps the registry of running builds and steps is its Engine.
package exec

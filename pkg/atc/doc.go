// Package atc is the ATC runtime server: Concourse's API, builds and their
// plans, step pods, the sidecar stream and build events. It parses no flags:
// cmd/atc-porter-runtime builds its Config and Deps and runs it.
package atc

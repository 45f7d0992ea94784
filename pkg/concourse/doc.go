// Package concourse holds Concourse's wire types as `fly` and the web UI
// exchange them with the ATC: API JSON, build plans and the intercept
// (hijack) protocol. It is written for this project from Concourse's
// documented shapes and has no behaviour beyond small accessors.
package concourse

// Version is what this server reports in GET /api/v1/info. `fly` compares it
// with its own version and warns on a mismatch, so it is the version of the
// Concourse API Porter answers, not Porter's own.
const Version = "8.2.5"

// WorkerVersion is the worker protocol version Concourse 8.2.5 reports.
const WorkerVersion = "2.5"

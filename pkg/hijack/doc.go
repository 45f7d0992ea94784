// Package hijack speaks Concourse's intercept (hijack) protocol over a
// WebSocket, both ends, exactly as Concourse 8.2.5's ATC and `fly` do:
//
//	GET /api/v1/teams/{team}/containers/{id}/hijack   (Authorization: bearer TOKEN)
//
// Every message is a JSON text frame. The client's first message is a
// concourse.HijackProcessSpec; after it the client sends
// concourse.HijackInput messages (stdin bytes, "closed" at the end of stdin,
// or a new terminal size) and the server sends concourse.HijackOutput
// messages: stdout and stderr bytes, then one exit_status or one error. An
// executable that does not exist is reported as {"executable_not_found":true}
// followed by an error; fly then retries its default shell "bash" as "sh".
// The server ends the session with a normal close frame; fly treats any close
// frame (or a dropped connection) as the end and exits with the last exit
// status it saw (255 after an error message, 0 if there was none). fly pings
// every 10 s and expects nothing else of the server for keepalive.
//
// On the server the process runs in the step's main container through the
// step sidecar's gRPC stream (see package stepserver); the client is what
// Porter's own CLI uses where `fly` is not installed.
package hijack

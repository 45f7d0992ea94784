package api

import "fmt"

// Intercept: a shell (or any command) inside a step's main container,
// carried over the step sidecar's own connection to the ATC.
//
//	GET /api/v1/builds/{id}/intercept    WebSocket; query: step (name or ID; default the
//	                                     build's only step), tty (default true), rows,
//	                                     cols, cmd (repeatable; default the image's shell)
//
// Before the upgrade, errors are plain answers: 400 for bad parameters, 404
// for an unknown build or step, 409 when the step's sidecar is not connected
// (the pod is not up yet, or gone). After it, every message is a JSON text
// frame holding one InterceptMessage.
//
// Client to server: input (Data), eof (stdin is closed), resize (Rows, Cols).
// Server to client: output (Stream, Data), then exactly one of exit (Status)
// or error (Message), after which the server closes the connection. Closing
// the connection from the client ends the session: its process is killed.

// Types of InterceptMessage.
const (
	InterceptInput  = "input"
	InterceptEOF    = "eof"
	InterceptResize = "resize"
	InterceptOutput = "output"
	InterceptExit   = "exit"
	InterceptError  = "error"
)

// Streams of an output InterceptMessage. With a TTY everything is stdout.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// InterceptMessage is one message of an intercept session.
type InterceptMessage struct {
	Type string `json:"type"`
	// Stream is stdout or stderr (output).
	Stream string `json:"stream,omitempty"`
	// Data is base64 in JSON (input, output).
	Data []byte `json:"data,omitempty"`
	// Rows and Cols are the terminal's size (resize).
	Rows uint32 `json:"rows,omitempty"`
	Cols uint32 `json:"cols,omitempty"`
	// Status is the process's exit status (exit).
	Status *int `json:"status,omitempty"`
	// Message says why the session failed (error).
	Message string `json:"message,omitempty"`
}

// InterceptPath is the path of a build's intercept endpoint.
func InterceptPath(id int64) string { return fmt.Sprintf("/api/v1/builds/%d/intercept", id) }

// Command flydocs writes docs/fly-commands.md from the specs
// (test/fly/flydocs): run it after changing a fly spec or
// test/fly/flydocs/commands.go.
//
//	go run ./hack/flydocs
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/porter-ci/porter/test/fly/flydocs"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "flydocs:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := flydocs.Root()
	if err != nil {
		return err
	}
	doc, err := flydocs.Generate(root)
	if err != nil {
		return err
	}
	path := filepath.Join(root, flydocs.DocPath)
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fmt.Println("wrote", flydocs.DocPath)
	return nil
}

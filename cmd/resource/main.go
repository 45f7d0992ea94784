// Command resource implements Porter's resource types with Concourse's resource
// protocol. Each resource image holds this one binary with /opt/resource/check,
// /opt/resource/in and /opt/resource/out linking to it: the action is the name
// it runs as (argv[0]) and the type comes from -type or PORTER_RESOURCE_TYPE,
// which the image sets.
//
//	/opt/resource/check            < request.json > versions.json
//	/opt/resource/in DIR           < request.json > response.json
//	resource -type mock check      (the same, by hand)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/porter-ci/porter/pkg/resource"
	"github.com/porter-ci/porter/pkg/resource/git"
	"github.com/porter-ci/porter/pkg/resource/mock"
	"github.com/porter-ci/porter/pkg/resource/registryimage"
	"github.com/porter-ci/porter/pkg/resource/timeres"
)

// EnvType names the resource type; the images set it.
const EnvType = "PORTER_RESOURCE_TYPE"

// typeNames are the types this binary implements.
var typeNames = []string{"mock", "time", "git", "registry-image"}

func newType(name string) (resource.Type, error) {
	switch name {
	case "mock":
		return mock.New(os.Getenv(mock.EnvImage)), nil
	case "time":
		return timeres.New(), nil
	case "git":
		return git.New(), nil
	case "registry-image":
		return registryimage.New(), nil
	case "":
		return nil, fmt.Errorf("no resource type: set -type or %s to one of %s", EnvType, strings.Join(typeNames, ", "))
	default:
		return nil, fmt.Errorf("unknown resource type %q: want one of %s", name, strings.Join(typeNames, ", "))
	}
}

func main() {
	os.Exit(run(os.Args))
}

func run(argv []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	action := filepath.Base(argv[0])
	fs := flag.NewFlagSet(action, flag.ContinueOnError)
	typeName := fs.String("type", os.Getenv(EnvType), "resource type: "+strings.Join(typeNames, ", "))
	if err := fs.Parse(argv[1:]); err != nil {
		return 2
	}
	args := fs.Args()
	switch action {
	case resource.ActionCheck, resource.ActionIn, resource.ActionOut:
	default:
		// Run by its own name: the action is the first argument.
		if len(args) == 0 {
			fmt.Fprintf(os.Stderr, "usage: %s [-type TYPE] check|in DIR|out DIR (or run it as /opt/resource/check, in, out)\n", action)
			return 2
		}
		action, args = args[0], args[1:]
	}
	t, err := newType(*typeName)
	if err != nil {
		fmt.Fprintf(os.Stderr, "resource: %v\n", err)
		return 2
	}
	if err := resource.Run(ctx, t, action, args, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "%s resource: %v\n", *typeName, err)
		return 1
	}
	return 0
}

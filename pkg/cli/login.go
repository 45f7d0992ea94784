package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/pkg/concourse"
)

type loginFlags struct {
	url            string
	insecure       bool
	username       string
	password       string
	team           string
	caCert         string
	clientCertPath string
	clientKeyPath  string
}

func (a *app) loginCommand() *cobra.Command {
	var f loginFlags
	cmd := &cobra.Command{
		Use:   "login -c URL -u USER -p PASSWORD [-n TEAM]",
		Short: "Log in to a server and save it as the target -t names",
		Long: `Logs in with a user name and password (fly's password grant) and saves
the server, team and token as the target -t names in ~/.flyrc, where fly
finds it too. Without -c, the target's saved URL is used. Without -p on a
terminal, the password is asked for.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.login(cmd.Context(), &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.url, "concourse-url", "c", "", "the server's URL")
	fl.BoolVarP(&f.insecure, "insecure", "k", false, "skip verification of the server's TLS certificate")
	fl.StringVarP(&f.username, "username", "u", "", "user name")
	fl.StringVarP(&f.password, "password", "p", "", "password")
	fl.StringVarP(&f.team, "team-name", "n", "", "the team to log in to (default: main, or the target's)")
	fl.StringVar(&f.caCert, "ca-cert", "", "path to the server's PEM-encoded CA certificate")
	fl.StringVar(&f.clientCertPath, "client-cert", "", "path to a PEM-encoded client certificate")
	fl.StringVar(&f.clientKeyPath, "client-key", "", "path to a PEM-encoded client key")
	return cmd
}

func (a *app) login(ctx context.Context, f *loginFlags) error {
	if a.targetName == "" {
		return errors.New("name for the target must be specified (--target/-t)")
	}
	// Start from the saved target: without -c, its URL; without -n, its team.
	t := target{Team: "main"}
	if f.url == "" {
		saved, err := a.selectTarget()
		if err != nil {
			return err
		}
		t = saved
	}
	if f.url != "" {
		t.API = strings.TrimSuffix(f.url, "/")
	}
	if f.team != "" {
		t.Team = f.team
	}
	t.Insecure = f.insecure
	if f.caCert != "" {
		pem, err := os.ReadFile(f.caCert)
		if err != nil {
			return fmt.Errorf("read CA certificate: %w", err)
		}
		t.CACert = string(pem)
	}
	if f.insecure {
		t.CACert = ""
	}
	if f.clientCertPath != "" || f.clientKeyPath != "" {
		t.ClientCertPath, t.ClientKeyPath = f.clientCertPath, f.clientKeyPath
	}
	t.Token = nil

	fmt.Fprintf(a.stdout, "logging in to team '%s'\n\n", t.Team)
	c, err := a.clientFor(t, "")
	if err != nil {
		return err
	}
	ictx, cancel := withTimeout(ctx)
	defer cancel()
	if _, err := c.Info(ictx); err != nil {
		return err
	}
	if f.username == "" {
		return errors.New("login needs -u USER and -p PASSWORD (the browser login is fly's)")
	}
	password := f.password
	if password == "" {
		if password, err = a.askPassword(); err != nil {
			return err
		}
	}
	tok, err := c.Login(ictx, f.username, password)
	if err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)

	t.Token = &targetToken{Type: tok.Type, Value: tok.Value}
	verify, err := a.clientFor(t, "")
	if err != nil {
		return err
	}
	if err := verifyTeam(ictx, verify, t.Team); err != nil {
		return err
	}
	if err := a.saveTarget(a.targetName, t); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout, "target saved")
	return nil
}

// verifyTeam checks, as fly does, that the token reaches team: a member
// sees it in its teams, an admin in the list of teams.
func verifyTeam(ctx context.Context, c *atcclient.Client, team string) error {
	u, err := c.UserInfo(ctx)
	if err != nil {
		return err
	}
	if !u.IsAdmin {
		if u.Teams == nil {
			return errors.New("unable to verify role on team")
		}
		if _, ok := u.Teams[team]; !ok {
			return errors.New("you are not a member of '" + team + "' or the team does not exist")
		}
		return nil
	}
	teams, err := c.Teams(ctx)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(teams, func(t concourse.Team) bool { return t.Name == team }) {
		return errors.New("team '" + team + "' does not exist")
	}
	return nil
}

// askPassword reads a password from a terminal without echo.
func (a *app) askPassword() (string, error) {
	f, ok := a.env.Stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return "", errors.New("login needs -p PASSWORD when stdin is not a terminal")
	}
	fmt.Fprint(a.stderr, "password: ")
	pw, err := term.ReadPassword(int(f.Fd()))
	fmt.Fprintln(a.stderr)
	if err != nil {
		return "", fmt.Errorf("read password: %w", err)
	}
	return string(pw), nil
}

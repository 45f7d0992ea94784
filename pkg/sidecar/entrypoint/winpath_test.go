package entrypoint

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

func TestWindowsLookPath(t *testing.T) {
	files := map[string]bool{
		`C:\Windows\system32\cmd.exe`:    true,
		`C:\tools\build.CMD`:             true,
		`C:\tools\go`:                    true, // no extension: not a command
		`C:\opt\resource\in.exe`:         true,
		`C:\tmp\build\1\repo\script.bat`: true,
	}
	// Windows file names are case-insensitive.
	isFile := func(p string) bool {
		for f := range files {
			if strings.EqualFold(f, p) {
				return true
			}
		}
		return false
	}
	env := []string{`Path=C:\tools\;C:\Windows\system32`, "APP=porter"}
	for _, tc := range []struct {
		name, want string
		env        []string
	}{
		{name: "cmd", want: `C:\Windows\system32\cmd.exe`},
		{name: "cmd.exe", want: `C:\Windows\system32\cmd.exe`},
		{name: "CMD.EXE", want: `C:\Windows\system32\CMD.EXE`, env: []string{`PATH=C:\Windows\system32`}},
		{name: "build", want: `C:\tools\build.CMD`},
		{name: `C:\opt\resource\in`, want: `C:\opt\resource\in.exe`},
		{name: `C:\opt\resource\in.exe`, want: `C:\opt\resource\in.exe`},
		{name: `repo\script`, want: `repo\script`}, // relative: left to the start
		{name: "/opt/resource/in", want: "/opt/resource/in"},
		{name: "build", want: `C:\tools\build.CMD`, env: []string{`PATH=C:\tools`, "PATHEXT=.CMD"}},
	} {
		e := env
		if tc.env != nil {
			e = tc.env
		}
		got, err := windowsLookPath(tc.name, e, isFile)
		if err != nil || !strings.EqualFold(got, tc.want) {
			t.Errorf("windowsLookPath(%q, %q) = %q, %v; want %q", tc.name, e, got, err, tc.want)
		}
	}
	for _, name := range []string{"go", "missing"} {
		if got, err := windowsLookPath(name, env, isFile); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("windowsLookPath(%q) = %q, %v; want not found", name, got, err)
		}
	}
}

package entrypoint

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// windowsDefaultPathExt is PATHEXT when the environment has none.
const windowsDefaultPathExt = ".COM;.EXE;.BAT;.CMD"

// windowsLookPath resolves a command the way Windows does, against the
// step's PATH and PATHEXT (env), with isFile telling whether a path is a
// regular file. Windows has no executable bit: a file is a command by its
// extension, and a name without one of PATHEXT's extensions is tried with
// each in turn. Pure, so that it is tested on Linux too; proc_windows.go
// calls it.
func windowsLookPath(name string, env []string, isFile func(string) bool) (string, error) {
	path, pathExt := "", windowsDefaultPathExt
	for _, kv := range env {
		// Windows environment names are case-insensitive.
		k, v, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "PATH":
			path = v
		case "PATHEXT":
			pathExt = v
		}
	}
	var exts []string
	for _, e := range strings.Split(pathExt, ";") {
		if e != "" {
			exts = append(exts, e)
		}
	}
	find := func(base string) (string, bool) {
		if slices.ContainsFunc(exts, func(e string) bool { return strings.EqualFold(e, windowsExt(base)) }) {
			return base, isFile(base)
		}
		for _, e := range exts {
			if isFile(base + e) {
				return base + e, true
			}
		}
		return "", false
	}
	if strings.ContainsAny(name, `/\:`) {
		if p, ok := find(name); ok {
			return p, nil
		}
		// Starting it reports that it is missing.
		return name, nil
	}
	for _, dir := range strings.Split(path, ";") {
		dir = strings.Trim(dir, `"`)
		if dir == "" {
			continue
		}
		if p, ok := find(strings.TrimRight(dir, `\/`) + `\` + name); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable file not found in PATH (%s): %w", path, fs.ErrNotExist)
}

// windowsExt is the extension of the last element of a Windows path.
func windowsExt(p string) string {
	base := p[strings.LastIndexAny(p, `/\:`)+1:]
	if i := strings.LastIndex(base, "."); i >= 0 {
		return base[i:]
	}
	return ""
}

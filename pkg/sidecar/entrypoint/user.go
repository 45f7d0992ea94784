//go:build !windows

package entrypoint

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
)

// lookupUser resolves run.user: "" keeps the container's user; otherwise a
// numeric uid[:gid] or a name[:group] from the image's /etc/passwd and
// /etc/group. It returns the credential to start the process with and the
// user's home directory.
func lookupUser(spec string) (*syscall.Credential, string, error) {
	if spec == "" {
		return nil, "", nil
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	cred := &syscall.Credential{}
	home := "/"
	if uid, err := strconv.ParseUint(name, 10, 32); err == nil {
		cred.Uid, cred.Gid = uint32(uid), uint32(uid)
		if u, err := user.LookupId(name); err == nil {
			home = u.HomeDir
			if gid, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
				cred.Gid = uint32(gid)
			}
		}
	} else {
		u, err := user.Lookup(name)
		if err != nil {
			return nil, "", fmt.Errorf("run.user %q: no such user in the image's /etc/passwd", spec)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		cred.Uid, cred.Gid, home = uint32(uid), uint32(gid), u.HomeDir
		if groups, err := u.GroupIds(); err == nil {
			for _, g := range groups {
				if id, err := strconv.ParseUint(g, 10, 32); err == nil {
					cred.Groups = append(cred.Groups, uint32(id))
				}
			}
		}
	}
	if hasGroup {
		gid, err := strconv.ParseUint(group, 10, 32)
		if err != nil {
			g, lerr := user.LookupGroup(group)
			if lerr != nil {
				return nil, "", fmt.Errorf("run.user %q: no such group %q in the image's /etc/group", spec, group)
			}
			gid, _ = strconv.ParseUint(g.Gid, 10, 32)
		}
		cred.Gid = uint32(gid)
	}
	if os.Geteuid() != 0 && cred.Uid != uint32(os.Geteuid()) {
		return nil, "", fmt.Errorf("run.user %q: the container does not run as root, so it cannot switch user", spec)
	}
	if os.Geteuid() != 0 {
		// The pod already runs as run.user (podspec's restricted shape), with
		// the group it was given; a non-root process could not change it.
		return nil, home, nil
	}
	if len(cred.Groups) == 0 {
		cred.NoSetGroups = os.Geteuid() != 0
	}
	return cred, home, nil
}

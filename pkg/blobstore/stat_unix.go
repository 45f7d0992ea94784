//go:build !windows

package blobstore

import (
	"io/fs"
	"syscall"
)

// fileStat is what an archive keeps of a file's inode.
type fileStat struct {
	uid, gid int
	nlink    uint64
	id       fileID
}

func ownership(fi fs.FileInfo) (fileStat, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st == nil {
		return fileStat{}, false
	}
	return fileStat{uid: int(st.Uid), gid: int(st.Gid), nlink: uint64(st.Nlink), id: fileID{uint64(st.Dev), st.Ino}}, true
}

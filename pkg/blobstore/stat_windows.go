package blobstore

import "io/fs"

// fileStat is what an archive keeps of a file's inode.
type fileStat struct {
	uid, gid int
	nlink    uint64
	id       fileID
}

// ownership has nothing to report on Windows: files have no numeric owner,
// and hard links are archived as separate copies.
func ownership(fs.FileInfo) (fileStat, bool) { return fileStat{}, false }

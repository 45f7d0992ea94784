// Package registryimage is the registry-image resource type, on
// go-containerregistry: versions are the digests a tag points at,
// {"digest": "sha256:..."}.
package registryimage

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/porter-ci/porter/pkg/resource"
)

// Source is the resource's source.
type Source struct {
	// Repository, e.g. "registry.local:5000/team/app" or "busybox".
	Repository string `json:"repository"`
	// Tag to track and push (default "latest").
	Tag resource.String `json:"tag"`
	// Username and Password for the registry (basic auth / token exchange).
	Username string `json:"username"`
	Password string `json:"password"`
	// Insecure talks plain http to the registry (the local dev registry).
	Insecure bool `json:"insecure"`
	// Variant suffixes the tag: TAG-VARIANT, or VARIANT alone when no tag is set.
	Variant resource.String `json:"variant"`
	// RegistryMirror, like Concourse's, serves Docker Hub repositories (e.g.
	// "busybox") from another registry; others are not affected. Insecure
	// applies to it too.
	RegistryMirror *Mirror `json:"registry_mirror"`
}

// Mirror is a registry that serves Docker Hub's repositories.
type Mirror struct {
	Host     string `json:"host"`
	Username string `json:"username"`
	Password string `json:"password"`
}

// InParams are the params of a get.
type InParams struct {
	// Format: "" (only the repository, tag and digest files), "rootfs"
	// (rootfs/ and metadata.json) or "oci" (image.tar, an OCI layout tarball).
	Format string `json:"format"`
	// SkipDownload is accepted for Concourse compatibility; nothing is
	// downloaded without a format anyway.
	SkipDownload bool `json:"skip_download"`
}

// OutParams are the params of a put.
type OutParams struct {
	// Image is the image to push, relative to the put's directory (a glob
	// matching one path): an OCI layout directory, an OCI layout tarball or a
	// `docker save` tarball.
	Image string `json:"image"`
	// AdditionalTags is a file (relative to the put's directory) of
	// whitespace-separated tags also pointed at the image.
	AdditionalTags string `json:"additional_tags"`
}

// VersionKey is the version's only key.
const VersionKey = "digest"

// Type is the registry-image resource type.
type Type struct {
	// Transport is the HTTP transport (nil: remote's default).
	Transport http.RoundTripper
}

// New returns the registry-image type.
func New() *Type { return &Type{} }

type config struct {
	src  Source
	tag  string
	opts []name.Option
	// remote is the repository the registry is asked for: the source's, or
	// its path on the mirror.
	remote             string
	username, password string
}

func parseSource(raw []byte) (config, error) {
	var c config
	if err := resource.Decode("registry-image source", raw, &c.src); err != nil {
		return c, err
	}
	if c.src.Repository == "" {
		return c, errors.New("source.repository is required")
	}
	if strings.ContainsAny(c.src.Repository, "@") || strings.Contains(path.Base(c.src.Repository), ":") {
		return c, fmt.Errorf("source.repository %q must not carry a tag or digest: use source.tag", c.src.Repository)
	}
	c.tag = string(c.src.Tag)
	switch {
	case c.src.Variant != "" && (c.tag == "" || c.tag == "latest"):
		c.tag = string(c.src.Variant)
	case c.src.Variant != "":
		c.tag += "-" + string(c.src.Variant)
	case c.tag == "":
		c.tag = "latest"
	}
	c.opts = nil
	if c.src.Insecure {
		c.opts = append(c.opts, name.Insecure)
	}
	repo, err := name.NewRepository(c.src.Repository, c.opts...)
	if err != nil {
		return c, fmt.Errorf("source.repository: %w", err)
	}
	c.remote, c.username, c.password = c.src.Repository, c.src.Username, c.src.Password
	if m := c.src.RegistryMirror; m != nil && repo.RegistryStr() == name.DefaultRegistry {
		if m.Host == "" {
			return c, errors.New("source.registry_mirror.host is required")
		}
		c.remote, c.username, c.password = m.Host+"/"+repo.RepositoryStr(), m.Username, m.Password
		if _, err := name.NewRepository(c.remote, c.opts...); err != nil {
			return c, fmt.Errorf("source.registry_mirror.host: %w", err)
		}
	}
	if _, err := name.NewTag(c.remote+":"+c.tag, c.opts...); err != nil {
		return c, fmt.Errorf("source.tag: %w", err)
	}
	return c, nil
}

func (c config) tagRef(tag string) (name.Tag, error) {
	ref, err := name.NewTag(c.remote+":"+tag, c.opts...)
	if err != nil {
		return name.Tag{}, fmt.Errorf("tag %q: %w", tag, err)
	}
	return ref, nil
}

func (c config) digestRef(digest string) (name.Digest, error) {
	ref, err := name.NewDigest(c.remote+"@"+digest, c.opts...)
	if err != nil {
		return name.Digest{}, fmt.Errorf("digest %q: %w", digest, err)
	}
	return ref, nil
}

func (t *Type) remoteOptions(ctx context.Context, c config) []remote.Option {
	auth := authn.Anonymous
	if c.username != "" || c.password != "" {
		auth = authn.FromConfig(authn.AuthConfig{Username: c.username, Password: c.password})
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})}
	if t.Transport != nil {
		opts = append(opts, remote.WithTransport(t.Transport))
	}
	return opts
}

// notFound reports whether err is the registry saying the tag, digest or
// repository does not exist.
func notFound(err error) bool {
	var terr *transport.Error
	if errors.As(err, &terr) {
		if terr.StatusCode == http.StatusNotFound {
			return true
		}
		for _, d := range terr.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode:
				return true
			}
		}
	}
	return false
}

// Check emits the digest the tag points at; when the given version differs
// and still exists it comes first. A missing tag gives no versions.
func (t *Type) Check(ctx context.Context, req resource.CheckRequest, log io.Writer) ([]resource.Version, error) {
	c, err := parseSource(req.Source)
	if err != nil {
		return nil, err
	}
	ref, err := c.tagRef(c.tag)
	if err != nil {
		return nil, err
	}
	opts := t.remoteOptions(ctx, c)
	desc, err := remote.Head(ref, opts...)
	if err != nil {
		if notFound(err) {
			resource.Logf(log, "%s does not exist (yet): no versions", ref)
			return []resource.Version{}, nil
		}
		return nil, fmt.Errorf("look up %s: %w", ref, err)
	}
	current := desc.Digest.String()
	versions := []resource.Version{}
	if prev := req.Version[VersionKey]; prev != "" && prev != current {
		if dref, err := c.digestRef(prev); err == nil {
			if _, err := remote.Head(dref, opts...); err == nil {
				versions = append(versions, resource.Version{VersionKey: prev})
			}
		}
	}
	return append(versions, resource.Version{VersionKey: current}), nil
}

// In writes repository, tag and digest files. Porter runs images by digest:
// Kubernetes pulls repository@digest itself, so by default no image content
// is copied; format rootfs or oci fetch it for tasks that want the bytes.
func (t *Type) In(ctx context.Context, dir string, req resource.InRequest, log io.Writer) (resource.Response, error) {
	c, err := parseSource(req.Source)
	if err != nil {
		return resource.Response{}, err
	}
	var p InParams
	if err := resource.Decode("registry-image get params", req.Params, &p); err != nil {
		return resource.Response{}, err
	}
	switch p.Format {
	case "", "rootfs", "oci":
	default:
		return resource.Response{}, fmt.Errorf("params.format %q: want rootfs or oci (or none)", p.Format)
	}
	digest := req.Version[VersionKey]
	if digest == "" {
		return resource.Response{}, fmt.Errorf("version %v has no %q", req.Version, VersionKey)
	}
	ref, err := c.digestRef(digest)
	if err != nil {
		return resource.Response{}, err
	}
	opts := t.remoteOptions(ctx, c)
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		if notFound(err) {
			return resource.Response{}, fmt.Errorf("%s does not exist (any more?): %w", ref, err)
		}
		return resource.Response{}, fmt.Errorf("fetch %s: %w", ref, err)
	}
	files := map[string]string{"repository": c.src.Repository, "tag": c.tag, "digest": digest}
	for n, content := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(content), 0o644); err != nil {
			return resource.Response{}, fmt.Errorf("write %s: %w", n, err)
		}
	}
	switch p.Format {
	case "rootfs":
		img, err := desc.Image()
		if err != nil {
			return resource.Response{}, fmt.Errorf("image of %s: %w", ref, err)
		}
		resource.Logf(log, "extracting %s into rootfs/", ref)
		if err := writeRootfs(dir, img); err != nil {
			return resource.Response{}, err
		}
	case "oci":
		resource.Logf(log, "writing %s to image.tar", ref)
		if err := writeOCITarball(dir, desc); err != nil {
			return resource.Response{}, err
		}
	}
	return resource.Response{Version: resource.Version{VersionKey: digest}, Metadata: []resource.MetadataField{
		{Name: "repository", Value: c.src.Repository}, {Name: "tag", Value: c.tag},
	}}, nil
}

// writeRootfs flattens img's layers into dir/rootfs and writes
// dir/metadata.json with the config's env and user.
func writeRootfs(dir string, img v1.Image) error {
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return fmt.Errorf("create rootfs: %w", err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	if err := untar(rc, rootfs); err != nil {
		return fmt.Errorf("extract the image into rootfs: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("read the image config: %w", err)
	}
	md, err := json.Marshal(struct {
		Env  []string `json:"env"`
		User string   `json:"user"`
	}{cfg.Config.Env, cfg.Config.User})
	if err != nil {
		return fmt.Errorf("encode metadata.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "metadata.json"), md, 0o644); err != nil {
		return fmt.Errorf("write metadata.json: %w", err)
	}
	return nil
}

// writeOCITarball writes dir/image.tar: an OCI image layout holding desc
// (image or index), tarred.
func writeOCITarball(dir string, desc *remote.Descriptor) error {
	tmp, err := os.MkdirTemp(dir, ".oci-")
	if err != nil {
		return fmt.Errorf("create a layout directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	lp, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("write an OCI layout: %w", err)
	}
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return fmt.Errorf("read the index: %w", err)
		}
		err = lp.AppendIndex(idx)
	} else {
		img, err2 := desc.Image()
		if err2 != nil {
			return fmt.Errorf("read the image: %w", err2)
		}
		err = lp.AppendImage(img)
	}
	if err != nil {
		return fmt.Errorf("write the image into the layout: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "image.tar"))
	if err != nil {
		return fmt.Errorf("create image.tar: %w", err)
	}
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(tmp)); err != nil {
		return errors.Join(fmt.Errorf("write image.tar: %w", err), f.Close())
	}
	if err := tw.Close(); err != nil {
		return errors.Join(fmt.Errorf("write image.tar: %w", err), f.Close())
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write image.tar: %w", err)
	}
	return nil
}

// untar extracts r into dir through os.Root, so no entry (nor a symlink an
// earlier entry made) can write outside dir. Device nodes are skipped: the
// resource runs unprivileged.
func untar(r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		n := path.Clean(strings.TrimPrefix(hdr.Name, "/"))
		if n == "." || n == ".." || strings.HasPrefix(n, "../") {
			continue
		}
		mode := fs.FileMode(hdr.Mode).Perm()
		if parent := path.Dir(n); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(n, 0o755); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
			if err := root.Chmod(n, mode); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		case tar.TypeReg:
			_ = root.Remove(n)
			f, err := root.OpenFile(n, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
			_, err = io.Copy(f, tr)
			if err := errors.Join(err, f.Close()); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		case tar.TypeSymlink:
			_ = root.Remove(n)
			if err := root.Symlink(hdr.Linkname, n); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		case tar.TypeLink:
			target := path.Clean(strings.TrimPrefix(hdr.Linkname, "/"))
			_ = root.Remove(n)
			if err := root.Link(target, n); err != nil {
				return fmt.Errorf("%s: link to %s: %w", n, target, err)
			}
		default:
			// Devices, fifos: not creatable without privileges, not needed.
		}
	}
}

// Out pushes params.image to the tag and the additional tags.
func (t *Type) Out(ctx context.Context, dir string, req resource.OutRequest, log io.Writer) (resource.Response, error) {
	c, err := parseSource(req.Source)
	if err != nil {
		return resource.Response{}, err
	}
	var p OutParams
	if err := resource.Decode("registry-image put params", req.Params, &p); err != nil {
		return resource.Response{}, err
	}
	if p.Image == "" {
		return resource.Response{}, errors.New("params.image is required: the image to push (OCI layout or tarball)")
	}
	pattern, err := resource.JoinInside(dir, p.Image)
	if err != nil {
		return resource.Response{}, fmt.Errorf("params.image: %w", err)
	}
	matches, err := filepath.Glob(pattern)
	if err != nil {
		return resource.Response{}, fmt.Errorf("params.image %q: %w", p.Image, err)
	}
	if len(matches) != 1 {
		return resource.Response{}, fmt.Errorf("params.image %q matches %d paths: want exactly one", p.Image, len(matches))
	}
	tags := []string{c.tag}
	if p.AdditionalTags != "" {
		f, err := resource.JoinInside(dir, p.AdditionalTags)
		if err != nil {
			return resource.Response{}, fmt.Errorf("params.additional_tags: %w", err)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return resource.Response{}, fmt.Errorf("params.additional_tags: %w", err)
		}
		tags = append(tags, strings.Fields(string(b))...)
	}
	tmp, err := os.MkdirTemp("", "registry-image-out-")
	if err != nil {
		return resource.Response{}, fmt.Errorf("create a scratch directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	img, idx, err := loadImage(matches[0], tmp)
	if err != nil {
		return resource.Response{}, fmt.Errorf("load %s: %w", p.Image, err)
	}
	opts := t.remoteOptions(ctx, c)
	var digest v1.Hash
	for i, tag := range tags {
		ref, err := c.tagRef(tag)
		if err != nil {
			return resource.Response{}, fmt.Errorf("additional tag: %w", err)
		}
		resource.Logf(log, "pushing to %s", ref)
		if idx != nil {
			if i == 0 {
				err = remote.WriteIndex(ref, idx, opts...)
			} else {
				err = remote.Tag(ref, idx, opts...)
			}
			if digest, err = errDigest(err, idx.Digest); err != nil {
				return resource.Response{}, fmt.Errorf("push %s: %w", ref, err)
			}
			continue
		}
		if i == 0 {
			err = remote.Write(ref, img, opts...)
		} else {
			err = remote.Tag(ref, img, opts...)
		}
		if digest, err = errDigest(err, img.Digest); err != nil {
			return resource.Response{}, fmt.Errorf("push %s: %w", ref, err)
		}
	}
	resource.Logf(log, "pushed %s@%s", c.src.Repository, digest)
	return resource.Response{Version: resource.Version{VersionKey: digest.String()}, Metadata: []resource.MetadataField{
		{Name: "repository", Value: c.src.Repository}, {Name: "tags", Value: strings.Join(tags, " ")},
	}}, nil
}

func errDigest(err error, digest func() (v1.Hash, error)) (v1.Hash, error) {
	if err != nil {
		return v1.Hash{}, err
	}
	return digest()
}

// loadImage reads an OCI layout directory, an OCI layout tarball (extracted
// into tmp) or a docker-save tarball. A layout's single entry is returned as
// an image, or as an index when it is one.
func loadImage(p, tmp string) (v1.Image, v1.ImageIndex, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, nil, err
	}
	if !info.IsDir() {
		if img, err := tarball.ImageFromPath(p, nil); err == nil {
			return img, nil, nil
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, nil, err
		}
		err = untar(f, tmp)
		if err := errors.Join(err, f.Close()); err != nil {
			return nil, nil, fmt.Errorf("neither a docker tarball nor an OCI layout tarball: %w", err)
		}
		p = tmp
	}
	idx, err := layout.ImageIndexFromPath(p)
	if err != nil {
		return nil, nil, fmt.Errorf("not an OCI layout (nor a docker tarball): %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, nil, fmt.Errorf("read the layout's index: %w", err)
	}
	if len(im.Manifests) != 1 {
		return nil, nil, fmt.Errorf("the layout holds %d manifests: want exactly one image or index", len(im.Manifests))
	}
	d := im.Manifests[0]
	if d.MediaType.IsIndex() {
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, nil, fmt.Errorf("read index %s: %w", d.Digest, err)
		}
		return nil, child, nil
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		return nil, nil, fmt.Errorf("read image %s: %w", d.Digest, err)
	}
	return img, nil, nil
}

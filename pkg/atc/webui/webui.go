// Package webui serves Porter's web UI: the single-page app built from
// web/ (see `make web`) and embedded here, at Concourse's own paths, in
// front of the API. The app reads only the public API that fly uses.
package webui

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/auth"
)

//go:embed dist
var dist embed.FS

// pagePrefixes are the UI's paths (Concourse's): each answers index.html
// and the app routes within it.
var pagePrefixes = []string{"/teams/", "/builds/"}

var pages = map[string]bool{"/": true, "/login": true, "/fly_success": true, "/dashboard": true, "/hd": true, "/favicon.ico": true}

// Wrap answers the UI's paths and hands every other request, /api/ and
// /sky/ included, to api. The UI's pages answer only a Host that is
// externalURL's (or an address), as the API does: a page served under an
// attacker's name (DNS rebinding) would run with this server's origin.
func Wrap(api http.Handler, externalURL string) http.Handler {
	ui, err := newUI()
	if err != nil {
		// The bundle is compiled in: a broken one is a build bug.
		panic(err)
	}
	pages := auth.RefuseForeignHost(externalURL)(ui)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && ui.owns(r.URL.Path) {
			pages.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

type ui struct {
	index  []byte
	assets fs.FS
}

func newUI() (*ui, error) {
	root, err := fs.Sub(dist, "dist")
	if err != nil {
		return nil, err
	}
	index, err := fs.ReadFile(root, "index.html")
	if err != nil {
		return nil, err
	}
	return &ui{index: index, assets: root}, nil
}

func (u *ui) owns(p string) bool {
	if pages[p] || strings.HasPrefix(p, "/assets/") {
		return true
	}
	for _, pre := range pagePrefixes {
		if strings.HasPrefix(p, pre) {
			return true
		}
	}
	return false
}

func (u *ui) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "deny")
	h.Set("Referrer-Policy", "same-origin")
	// The app's scripts and styles come from here only; connect-src lets
	// /fly_success hand the token to fly's listener on 127.0.0.1.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "+
		"connect-src 'self' http://127.0.0.1:*; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	if r.URL.Path == "/favicon.ico" {
		data, err := fs.ReadFile(u.assets, "favicon.ico")
		if err != nil {
			http.NotFound(w, r)
			return
		}
		// Its name has no hash: a day, then asked again.
		h.Set("Cache-Control", "public, max-age=86400")
		h.Set("Content-Type", "image/x-icon")
		http.ServeContent(w, r, "favicon.ico", time.Time{}, bytes.NewReader(data))
		return
	}
	if strings.HasPrefix(r.URL.Path, "/assets/") {
		clean := path.Clean(r.URL.Path)
		name := strings.TrimPrefix(clean, "/")
		data, err := fs.ReadFile(u.assets, name)
		if err != nil || !strings.HasPrefix(clean, "/assets/") {
			http.NotFound(w, r)
			return
		}
		// Asset names carry their content's hash: they never change.
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(data))
		return
	}
	// index.html names the current assets: always fetch it afresh.
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Type", "text/html; charset=utf-8")
	http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(u.index))
}

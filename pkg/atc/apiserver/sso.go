package apiserver

import (
	"net/http"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// connector is what the login page lists beside the local user form.
type connector struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	// LoginURL is where the browser goes to log in with it; the page adds
	// fly_port and redirect.
	LoginURL string `json:"login_url"`
}

// handleConnectors answers GET /sky/connectors: the single sign-on
// connectors (none, or OIDC), for the login page.
func (s *Server) handleConnectors(w http.ResponseWriter, _ *http.Request) {
	out := []connector{}
	if s.oidc != nil {
		out = append(out, connector{ID: auth.OIDCConnector, DisplayName: s.oidc.DisplayName(), LoginURL: auth.OIDCLoginPath})
	}
	httpreply.JSON(w, http.StatusOK, out)
}

const noOIDC = "single sign-on with OIDC is not configured on this server (see --oidc-issuer)"

// handleOIDCLogin answers GET /sky/issuer/auth/oidc: off to the identity
// provider.
func (s *Server) handleOIDCLogin(w http.ResponseWriter, r *http.Request) {
	if s.oidc == nil {
		s.fail(w, r, apierr.NotFound("Connector Not Found Error", noOIDC))
		return
	}
	s.oidc.Login(w, r)
}

// handleOIDCCallback answers GET /sky/issuer/callback: back from the
// identity provider.
func (s *Server) handleOIDCCallback(w http.ResponseWriter, r *http.Request) {
	if s.oidc == nil {
		s.fail(w, r, apierr.NotFound("Connector Not Found Error", noOIDC))
		return
	}
	s.oidc.Callback(w, r)
}

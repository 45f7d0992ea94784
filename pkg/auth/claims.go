// Package auth is Porter's side of Concourse's login: local users with bcrypt
// passwords, the password grant fly uses at POST /sky/issuer/token, signed
// tokens, request authentication and per-team authorization with Concourse's
// roles.
package auth

import (
	"encoding/base64"
	"encoding/binary"
	"slices"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
)

// Concourse's team roles, strongest first.
const (
	RoleOwner    = "owner"
	RoleMember   = "member"
	RoleOperator = "pipeline-operator"
	RoleViewer   = "viewer"
)

// MainTeam is the team whose owners are admins of the whole server.
const MainTeam = "main"

// LocalConnector is the connector ID of users added with --add-local-user.
const LocalConnector = "local"

// Claims are what a token says about its holder.
type Claims struct {
	Subject   string // Concourse-style sub, see SubjectFor
	UserID    string // "test"
	Name      string // the "name" claim; for local users the login name
	UserName  string // the "preferred_username" claim; empty for local users, as in Concourse
	Email     string
	Connector string              // "local"
	Teams     map[string][]string // team -> roles (owner, member, pipeline-operator, viewer)
	IsAdmin   bool                // owner of team "main"; Verify derives it from Teams
	// Generation is the user's token generation when the token was issued
	// (see Session); 0 in tokens from before generations existed.
	Generation int64

	Expiry, IssuedAt time.Time
}

// SubjectFor is the "sub" Concourse (dex) gives a user: the protobuf encoding of
// {user_id, conn_id}, unpadded base64url. Matching it keeps subjects stable for
// anything that compares them with a real Concourse's.
func SubjectFor(connector, userID string) string {
	b := make([]byte, 0, 4+len(userID)+len(connector))
	b = append(b, 0x0a) // field 1, length-delimited
	b = binary.AppendUvarint(b, uint64(len(userID)))
	b = append(b, userID...)
	b = append(b, 0x12) // field 2, length-delimited
	b = binary.AppendUvarint(b, uint64(len(connector)))
	b = append(b, connector...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// isAdmin is Concourse's rule: an owner of the main team administers everything.
func isAdmin(teams map[string][]string) bool {
	return slices.Contains(teams[MainTeam], RoleOwner)
}

// Roles are the holder's roles on team, nil if none.
func (c Claims) Roles(team string) []string {
	return slices.Clone(c.Teams[team])
}

// CanRead reports whether the holder may see team's resources.
func (c Claims) CanRead(team string) bool {
	return c.hasRole(team, RoleViewer)
}

// CanWrite reports whether the holder may change team's pipelines' state
// (Concourse's pipeline-operator level). One-off builds need more: see Can.
func (c Claims) CanWrite(team string) bool {
	return c.hasRole(team, RoleOperator)
}

// Can reports whether the holder may perform action on team. An unknown action
// is refused.
func (c Claims) Can(team string, action Action) bool {
	role, ok := RequiredRole(action)
	if !ok {
		return false
	}
	return c.hasRole(team, role)
}

// hasRole reports whether the holder has role on team or a stronger one, or is
// admin (Concourse lets admins act on every team).
func (c Claims) hasRole(team, role string) bool {
	if c.IsAdmin {
		return true
	}
	want := roleRank(role)
	if want == 0 {
		return false
	}
	for _, r := range c.Teams[team] {
		if got := roleRank(r); got >= want {
			return true
		}
	}
	return false
}

// roleRank orders the roles; 0 is no role.
func roleRank(role string) int {
	switch role {
	case RoleOwner:
		return 4
	case RoleMember:
		return 3
	case RoleOperator:
		return 2
	case RoleViewer:
		return 1
	default:
		return 0
	}
}

// Action is something a request does to a team, named as Concourse names the
// route in atc/routes.go.
type Action string

// The actions Porter's API checks.
const (
	ActionRead            Action = "Read" // any GET of the team's things
	ActionCreateBuild     Action = "CreateBuild"
	ActionAbortBuild      Action = "AbortBuild"
	ActionSetBuildComment Action = "SetBuildComment"
	ActionHijack          Action = "HijackContainer"
	ActionCreateArtifact  Action = "CreateArtifact"
	ActionGetArtifact     Action = "GetArtifact"
	ActionSaveConfig      Action = "SaveConfig" // set-pipeline
	ActionDeletePipeline  Action = "DeletePipeline"
	ActionRenamePipeline  Action = "RenamePipeline"
	ActionExposePipeline  Action = "ExposePipeline"
	ActionHidePipeline    Action = "HidePipeline"
	ActionPausePipeline   Action = "PausePipeline"
	ActionUnpausePipeline Action = "UnpausePipeline"
	ActionCreateJobBuild  Action = "CreateJobBuild" // trigger-job
	ActionPauseJob        Action = "PauseJob"
	ActionUnpauseJob      Action = "UnpauseJob"
	ActionCheckResource   Action = "CheckResource"
	ActionRegisterWorker  Action = "RegisterWorker"
	ActionPruneWorker     Action = "PruneWorker"
	ActionSetTeam         Action = "SetTeam"
	ActionDestroyTeam     Action = "DestroyTeam"
)

// The actions of pipeline management beyond those above.
const (
	ActionOrderPipelines     Action = "OrderPipelines"
	ActionClearTaskCache     Action = "ClearTaskCache"
	ActionClearResourceCache Action = "ClearResourceCache"
	ActionArchivePipeline    Action = "ArchivePipeline"
	ActionScheduleJob        Action = "ScheduleJob"
)

// RequiredRole is the weakest role that may perform action, copied from
// Concourse's atc/api/accessor DefaultRoles so fly users meet the same rules.
// Note that in Concourse aborting a build needs only pipeline-operator while
// creating one needs member.
func RequiredRole(action Action) (role string, ok bool) {
	switch action {
	case ActionRead:
		return RoleViewer, true
	case ActionAbortBuild, ActionSetBuildComment, ActionPausePipeline, ActionUnpausePipeline,
		ActionCreateJobBuild, ActionPauseJob, ActionUnpauseJob, ActionCheckResource:
		return RoleOperator, true
	case ActionCreateBuild, ActionHijack, ActionCreateArtifact, ActionGetArtifact,
		ActionSaveConfig, ActionDeletePipeline, ActionRenamePipeline,
		ActionExposePipeline, ActionHidePipeline, ActionRegisterWorker, ActionPruneWorker:
		return RoleMember, true
	case ActionClearTaskCache, ActionClearResourceCache, ActionScheduleJob:
		return RoleOperator, true
	case ActionOrderPipelines, ActionArchivePipeline:
		return RoleMember, true
	case ActionSetTeam, ActionDestroyTeam:
		return RoleOwner, true
	default:
		return "", false
	}
}

// UserInfo is what GET /api/v1/user answers for the holder.
func (c Claims) UserInfo() concourse.UserInfo {
	// fly refuses a non-admin whose teams are null ("unable to verify role on
	// team"), so an empty map, never nil.
	teams := make(map[string][]string, len(c.Teams))
	for team, roles := range c.Teams {
		teams[team] = slices.Clone(roles)
	}
	return concourse.UserInfo{
		Sub:           c.Subject,
		Name:          c.Name,
		UserID:        c.UserID,
		UserName:      c.UserName,
		Email:         c.Email,
		IsAdmin:       c.IsAdmin,
		Teams:         teams,
		Connector:     c.Connector,
		DisplayUserID: c.displayUserID(),
	}
}

// displayUserID is Concourse's default rule (skymarshal/skycmd): the preferred
// username, else the connector's user ID, else the name.
func (c Claims) displayUserID() string {
	switch {
	case c.UserName != "":
		return c.UserName
	case c.UserID != "":
		return c.UserID
	default:
		return c.Name
	}
}

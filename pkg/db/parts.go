package db

import (
	"github.com/porter-ci/porter/pkg/db/accounts"
	"github.com/porter-ci/porter/pkg/db/containers"
	"github.com/porter-ci/porter/pkg/db/resourcecaches"
	"github.com/porter-ci/porter/pkg/db/serverstate"
	"github.com/porter-ci/porter/pkg/db/workers"
)

// The types of the store's parts, under the names callers have always used.
type (
	Team              = accounts.Team
	TeamAuth          = accounts.TeamAuth
	RoleMembers       = accounts.RoleMembers
	UserSession       = accounts.UserSession
	User              = accounts.User
	Worker            = workers.Worker
	WorkerLoad        = workers.WorkerLoad
	Container         = containers.Container
	ContainerFilter   = containers.ContainerFilter
	FinishedContainer = containers.FinishedContainer
	ResourceCache     = resourcecaches.ResourceCache
	TeamResourceCache = resourcecaches.TeamCache
	Wall              = serverstate.Wall
	Component         = serverstate.Component
)

// ErrWorkerRunning is workers.ErrWorkerRunning, under its old name.
var ErrWorkerRunning = workers.ErrWorkerRunning

// ResourceCacheKey is resourcecaches.Key, under its old name.
func ResourceCacheKey(teamID int, typ, image string, source, params any, version map[string]string) (string, error) {
	return resourcecaches.Key(teamID, typ, image, source, params, version)
}

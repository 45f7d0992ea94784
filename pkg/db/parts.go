package db

import (
	"github.com/porter-ci/porter/pkg/db/accounts"
	"github.com/porter-ci/porter/pkg/db/containers"
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
	Wall              = serverstate.Wall
	Component         = serverstate.Component
)

// ErrWorkerRunning is workers.ErrWorkerRunning, under its old name.
var ErrWorkerRunning = workers.ErrWorkerRunning

package db

import (
	"github.com/porter-ci/porter/pkg/db/accounts"
	"github.com/porter-ci/porter/pkg/db/workers"
)

// The types of the store's parts, under the names callers have always used.
type (
	Team        = accounts.Team
	TeamAuth    = accounts.TeamAuth
	RoleMembers = accounts.RoleMembers
	UserSession = accounts.UserSession
	User        = accounts.User
	Worker      = workers.Worker
	WorkerLoad  = workers.WorkerLoad
)

// ErrWorkerRunning is workers.ErrWorkerRunning, under its old name.
var ErrWorkerRunning = workers.ErrWorkerRunning

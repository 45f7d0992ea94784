package flydocs

// Commands are fly 8.2.5's commands, in `fly --help`'s order: how each
// works against Porter and the specs that run it (see the package's doc).
var Commands = []Command{
	{
		Name: "abort-build",
		How:  "",
		Specs: []string{
			"test/fly/builds_test.go :: aborts a running build (abort-build)",
		},
	},
	{
		Name: "active-users",
		How:  "Every login is recorded (connector, user, time) in `users`; `--since` filters by date",
		Specs: []string{
			"test/fly/flycmds_test.go :: lists active users and shows the token's expiry",
		},
	},
	{
		Name: "archive-pipeline",
		How:  "Paused and archived; hidden from `pipelines` unless `--include-archived`; `set-pipeline` unarchives it and leaves it paused, as in Concourse; `-a` archives every unarchived one",
		Specs: []string{
			"test/fly/flycmds_test.go :: archives a pipeline, and set-pipeline unarchives it paused",
		},
	},
	{
		Name: "builds",
		How:  "With `-j`, `-p` (a pipeline's job builds), `--team`, `-a`, `-c`, `--json`, and `--since`/`--until` as start times (fly sends Unix times with `timestamps=true`; inclusive bounds on the build's start, as Concourse)",
		Specs: []string{
			"test/fly/builds_test.go :: lists builds with their status, team and creator",
			"test/fly/flycmds_test.go :: lists a pipeline's builds, and builds by start time",
		},
	},
	{
		Name: "check-resource",
		How:  "`-f` is the version the check starts from, and the `mock` type's check returns it as Concourse's does, so `-f version:v2` makes v2",
		Specs: []string{
			"test/pipelines/examples_test.go :: chains two jobs by passed",
			"test/fly/mock_test.go :: makes the version check-resource -f gives",
		},
	},
	{
		Name: "check-resource-type",
		How:  "Runs the type's check as a build that fly follows (`checking P/T in build N` … `succeeded`). Porter keeps no versions of a type (each use resolves the type's image with this same check), so the check says whether that works now. A type whose `type:` is itself a custom type is refused with a 400 naming both",
		Specs: []string{
			"test/fly/flycmds_test.go :: clears a resource's versions and a resource type's",
		},
	},
	{
		Name: "checklist",
		How:  "",
		Specs: []string{
			"test/fly/flycmds_test.go :: answers the other reads, and fly's local commands work beside it",
		},
	},
	{
		Name: "clear-resource-cache",
		How:  "`-v` clears that version's caches only (matched exactly, as Concourse)",
		Specs: []string{
			"test/fly/pipelines_test.go :: clears a job's task caches and a resource's caches",
			"test/fly/flycmds_test.go :: clears the caches of one version of a resource",
		},
	},
	{
		Name: "clear-task-cache",
		How:  "",
		Specs: []string{
			"test/fly/pipelines_test.go :: clears a job's task caches and a resource's caches",
		},
	},
	{
		Name: "clear-versions",
		How:  "Admins only as in Concourse: `--resource` deletes the resource's versions (and the builds' records of them); versions are a resource's own in Porter, so the confirmation lists only it. `--resource-type` answers \"0 versions removed\": a type's versions are never stored",
		Specs: []string{
			"test/fly/flycmds_test.go :: clears a resource's versions and a resource type's",
		},
	},
	{
		Name: "clear-wall",
		How:  "",
		Specs: []string{
			"test/fly/flycmds_test.go :: sets, shows and clears the wall",
		},
	},
	{
		Name: "completion",
		Kind: Local,
		How:  "",
		Specs: []string{
			"test/fly/flycmds_test.go :: answers the other reads, and fly's local commands work beside it",
		},
	},
	{
		Name: "containers",
		How:  "A job build's containers name their pipeline and job; a check's is named once, by its resource (`step_name`, no `resource_name`, as Concourse presents it: fly prints the two together), with build # `check`",
		Specs: []string{
			"test/fly/flycmds_test.go :: names the pipeline and job of a job build's containers",
			"test/fly/info_test.go :: lists a build's step pod (containers)",
			"test/fly/info_test.go :: names a check's container once, by its resource",
		},
	},
	{
		Name: "curl",
		How:  "",
		Specs: []string{
			"test/fly/info_test.go :: calls the API with the target's token (curl)",
		},
	},
	{
		Name: "delete-target",
		Kind: Local,
		How:  "",
		Specs: []string{
			"test/fly/flycmds_test.go :: answers the other reads, and fly's local commands work beside it",
		},
	},
	{
		Name: "destroy-pipeline",
		How:  "",
		Specs: []string{
			"test/fly/pipelines_test.go :: pauses, exposes, hides, renames, orders and destroys pipelines",
		},
	},
	{
		Name: "destroy-team",
		How:  "Admins only: the team's running builds are aborted, then the team goes with its pipelines, builds, containers' and artifacts' records, resource caches and task caches. `main` (the admin team) is refused with a bare 403, which fly explains (\"could not destroy `main`\")",
		Specs: []string{
			"test/fly/flycmds_test.go :: renames and destroys a team",
		},
	},
	{
		Name: "disable-resource-version",
		How:  "",
		Specs: []string{
			"test/fly/jobs_test.go :: lists, pins, comments, unpins, disables and enables resource versions",
		},
	},
	{
		Name: "edit-target",
		Kind: Local,
		How:  "",
		Specs: []string{
			"test/fly/flycmds_test.go :: answers the other reads, and fly's local commands work beside it",
		},
	},
	{
		Name: "enable-resource-version",
		How:  "",
		Specs: []string{
			"test/fly/jobs_test.go :: lists, pins, comments, unpins, disables and enables resource versions",
		},
	},
	{
		Name: "execute",
		How:  "`-c`, `-i`, `-o`, `-p`, `--tag`, `-v/-y/-l`, `--include-ignored`, args after `--`",
		Specs: []string{
			"test/fly/execute_test.go :: runs a task config (-c) and shows its events",
			"test/fly/execute_test.go :: uploads an input (-i)",
			"test/fly/execute_test.go :: downloads an output (-o)",
			"test/fly/execute_test.go :: runs privileged with -p",
			"test/fly/execute_test.go :: fills ((vars)) from -v, -y and -l",
		},
	},
	{
		Name: "expose-pipeline",
		How:  "",
		Specs: []string{
			"test/fly/pipelines_test.go :: pauses, exposes, hides, renames, orders and destroys pipelines",
		},
	},
	{
		Name: "format-pipeline",
		Kind: Local,
		How:  "",
		Specs: []string{
			"test/fly/flycmds_test.go :: answers the other reads, and fly's local commands work beside it",
		},
	},
	{
		Name: "get-components",
		How:  "Porter's periodic loops, with Concourse's names where the work is the same: `scheduler` (job scheduling), `scanner` (periodic resource checks), `collector` (GC: pods, artifacts, caches, build logs); interval and last run as recorded by the loop",
		Specs: []string{
			"test/fly/flycmds_test.go :: pauses the scheduler, so a triggered build waits until it is unpaused",
		},
	},
	{
		Name: "get-pipeline",
		How:  "",
		Specs: []string{
			"test/fly/pipelines_test.go :: sets a pipeline with -v, -y and -l, shows it, and applies only changes",
		},
	},
	{
		Name: "get-team",
		How:  "",
		Specs: []string{
			"test/fly/flycmds_test.go :: answers the other reads, and fly's local commands work beside it",
		},
	},
	{
		Name: "get-wall",
		How:  "Public, as in Concourse",
		Specs: []string{
			"test/fly/flycmds_test.go :: sets, shows and clears the wall",
		},
	},
	{
		Name: "help",
		Kind: Local,
		How:  "",
		Specs: []string{
			"test/fly/flycmds_test.go :: answers the other reads, and fly's local commands work beside it",
		},
	},
	{
		Name: "hide-pipeline",
		How:  "",
		Specs: []string{
			"test/fly/pipelines_test.go :: pauses, exposes, hides, renames, orders and destroys pipelines",
		},
	},
	{
		Name:  "hijack",
		Alias: "intercept",
		How:   "`-b`, `-s`, `-j P/J` (only that job's containers: the pipeline and job are filters), `--check P/R`; a step whose pod is gone fails with fly's own error (`404 Not Found websocket: bad handshake`) and exit 1; a command the step's image lacks is said (`start \"nosuchcmd\": command not found in PATH (…)`) with exit 255, where Concourse's words make fly exit 0 silently",
		Specs: []string{
			"test/fly/intercept_test.go :: runs a command in a finished step",
			"test/fly/intercept_test.go :: says a command the step's image lacks is not found, and exits non-zero",
			"test/fly/flycmds_test.go :: intercepts the step of the job named, and fails for a step that is gone",
		},
	},
	{
		Name: "jobs",
		How:  "",
		Specs: []string{
			"test/fly/pipelines_test.go :: lists and pauses jobs, and lists resources",
		},
	},
	{
		Name: "land-worker",
		How:  "An unknown name says `worker 'x' not found`",
		Specs: []string{
			"test/fly/workers_test.go :: lands a worker with a running build",
			"test/fly/flycmds_test.go :: says which worker it does not know",
		},
	},
	{
		Name: "login",
		How:  "With `-u/-p` (local users, the password grant), and without `-u` through the browser: fly prints `/login?fly_port=N`, the web UI logs in with a local user or with OIDC (`--oidc-*`, a real Dex in the spec) and hands the token to fly's listener",
		Specs: []string{
			"test/fly/auth_test.go :: logs in with a password and saves the target, without a version warning",
			"test/ui/ui_test.go :: logs fly in through the browser, and logs out",
			"test/ui/ui_test.go :: logs fly in with OIDC at a real Dex, with the teams its group is granted",
		},
	},
	{
		Name: "logout",
		Kind: Local,
		How:  "fly forgets its token (`fly curl /sky/logout` also ends it on the server, for every copy)",
		Specs: []string{
			"test/fly/auth_test.go :: logs out: status then says logged out",
		},
	},
	{
		Name: "order-instanced-pipelines",
		How:  "`PUT …/pipelines/P/ordering` orders a group's instances",
		Specs: []string{
			"test/pipelines/language_test.go :: sets instanced pipelines with fly set-pipeline -i, runs a job of one, and orders them",
		},
	},
	{
		Name: "order-pipelines",
		How:  "",
		Specs: []string{
			"test/fly/pipelines_test.go :: pauses, exposes, hides, renames, orders and destroys pipelines",
		},
	},
	{
		Name: "pause-component",
		How:  "Admins only: `-n scheduler`, `-n scanner`, `-n collector`, `-a`, and `--runtime-components`/`--gc-components` (Concourse's names map onto Porter's: `tracker` → scheduler; `reaper`, `pipeline_pauser`, `collector_*` → collector). Paused is in the database, so every server's loop skips its passes until unpaused; a job build triggered meanwhile stays pending",
		Specs: []string{
			"test/fly/flycmds_test.go :: pauses the scheduler, so a triggered build waits until it is unpaused",
		},
	},
	{
		Name: "pause-job",
		How:  "",
		Specs: []string{
			"test/fly/pipelines_test.go :: lists and pauses jobs, and lists resources",
		},
	},
	{
		Name: "pause-pipeline",
		How:  "",
		Specs: []string{
			"test/fly/pipelines_test.go :: pauses, exposes, hides, renames, orders and destroys pipelines",
		},
	},
	{
		Name: "paused-jobs",
		How:  "",
		Specs: []string{
			"test/fly/flycmds_test.go :: answers the other reads, and fly's local commands work beside it",
		},
	},
	{
		Name: "paused-pipelines",
		How:  "",
		Specs: []string{
			"test/fly/flycmds_test.go :: answers the other reads, and fly's local commands work beside it",
		},
	},
	{
		Name: "pin-resource",
		How:  "",
		Specs: []string{
			"test/fly/jobs_test.go :: lists, pins, comments, unpins, disables and enables resource versions",
		},
	},
	{
		Name: "pipelines",
		How:  "With `-a`, `--include-archived`, `--json`",
		Specs: []string{
			"test/fly/pipelines_test.go :: keeps each team's pipelines to itself, except exposed ones",
			"test/fly/flycmds_test.go :: archives a pipeline",
		},
	},
	{
		Name: "prune-worker",
		How:  "An unknown name says `worker 'x' not found`",
		Specs: []string{
			"test/fly/workers_test.go :: lands a worker",
			"test/fly/flycmds_test.go :: says which worker it does not know",
		},
	},
	{
		Name: "rename-pipeline",
		How:  "Task caches move with it",
		Specs: []string{
			"test/fly/pipelines_test.go :: pauses, exposes, hides, renames, orders and destroys pipelines",
		},
	},
	{
		Name: "rename-team",
		How:  "An admin or the team's owner; task caches move with it; `main` is refused (403: admin is decided by that name); an unknown team says `Team 'x' not found`",
		Specs: []string{
			"test/fly/flycmds_test.go :: renames and destroys a team",
		},
	},
	{
		Name: "rerun-build",
		How:  "",
		Specs: []string{
			"test/fly/jobs_test.go :: triggers a one-task job and watches it",
		},
	},
	{
		Name: "resource-versions",
		How:  "",
		Specs: []string{
			"test/fly/jobs_test.go :: lists, pins, comments, unpins, disables and enables resource versions",
		},
	},
	{
		Name: "resources",
		How:  "",
		Specs: []string{
			"test/fly/pipelines_test.go :: lists and pauses jobs, and lists resources",
		},
	},
	{
		Name: "schedule-job",
		How:  "Asks the scheduler to look at the job now",
		Specs: []string{
			"test/fly/flycmds_test.go :: pauses the scheduler, so a triggered build waits until it is unpaused",
		},
	},
	{
		Name: "set-pipeline",
		How:  "With `-v`, `-y`, `-l`, `-i` (instanced pipelines, ordered with `order-instanced-pipelines`) and the pipeline language's steps: `load_var`, `across`, `var_sources`, `set_pipeline` (itself, and children with vars and var_files from a get), job and task hooks; what the server cannot run is refused at set time, naming the step. `--check-creds` looks up, as Concourse does, every `((var))` in resource and resource-type sources, `webhook_token`, task `params`/`vars` and embedded task configs in the team's credential manager, and refuses the save with `credential validation failed` and the missing vars; as in Concourse a var is looked up by its path whatever source it names, so `((vs:x))` (var_sources) and `((.:x))` (load_var, across) pass only when the manager holds `x`",
		Specs: []string{
			"test/fly/pipelines_test.go :: sets a pipeline with -v, -y and -l",
			"test/fly/pipelines_test.go :: checks credentials with --check-creds",
			"test/pipelines/language_test.go :: sets instanced pipelines with fly set-pipeline -i, runs a job of one, and orders them",
			"test/pipelines/language_test.go :: loads vars from files (json, trim, reveal), reads a dummy var source and runs a step across values",
			"test/pipelines/language_test.go :: sets itself, then child pipelines with vars and var_files",
			"test/pipelines/language_test.go :: refuses at set time, naming the step",
			"test/pipelines/examples_test.go :: runs job and task hooks",
		},
	},
	{
		Name: "set-team",
		How:  "Local users and groups, and OIDC users and groups (`--oidc-user`, `--oidc-group`), enforced for OIDC logins (a user by `sub` or the `--oidc-user-name-key` claim only)",
		Specs: []string{
			"test/fly/teams_test.go :: creates and updates a team as an admin",
			"test/ui/ui_test.go :: logs fly in with OIDC at a real Dex, with the teams its group is granted",
			"test/ui/ui_test.go :: keeps oidc:<name> roles from a Dex user who renames itself to another's name",
		},
	},
	{
		Name: "set-wall",
		How:  "Admins only, with `--ttl`",
		Specs: []string{
			"test/fly/flycmds_test.go :: sets, shows and clears the wall",
		},
	},
	{
		Name: "status",
		How:  "",
		Specs: []string{
			"test/fly/auth_test.go :: logs in with a password",
		},
	},
	{
		Name: "sync",
		Kind: Refused,
		How:  "Porter does not distribute fly; `fly sync` fails saying to use Concourse's fly 8.2.5",
		Specs: []string{
			"test/fly/info_test.go :: fails fly sync --force clearly and leaves fly alone",
		},
	},
	{
		Name: "targets",
		How:  "With the expiry column: fly holds an opaque token as Concourse's (20 random bytes and the expiry), which the server maps to the signed token it stands for (the login's `id_token`)",
		Specs: []string{
			"test/fly/flycmds_test.go :: lists active users and shows the token's expiry",
		},
	},
	{
		Name: "teams",
		How:  "`-d`",
		Specs: []string{
			"test/fly/teams_test.go :: lists the teams (teams)",
		},
	},
	{
		Name: "trigger-job",
		How:  "`-w`",
		Specs: []string{
			"test/fly/jobs_test.go :: triggers a one-task job and watches it",
		},
	},
	{
		Name: "unpause-component",
		How:  "See `pause-component`",
		Specs: []string{
			"test/fly/flycmds_test.go :: pauses the scheduler",
		},
	},
	{
		Name: "unpause-job",
		How:  "",
		Specs: []string{
			"test/fly/pipelines_test.go :: lists and pauses jobs, and lists resources",
		},
	},
	{
		Name: "unpause-pipeline",
		How:  "",
		Specs: []string{
			"test/fly/pipelines_test.go :: pauses, exposes, hides, renames, orders and destroys pipelines",
		},
	},
	{
		Name: "unpin-resource",
		How:  "",
		Specs: []string{
			"test/fly/jobs_test.go :: lists, pins, comments, unpins, disables and enables resource versions",
		},
	},
	{
		Name: "userinfo",
		How:  "",
		Specs: []string{
			"test/fly/auth_test.go :: shows the logged-in user's teams and roles (userinfo)",
		},
	},
	{
		Name: "validate-pipeline",
		Kind: Local,
		How:  "fly validates; Porter's own refusals come at `set-pipeline`",
		Specs: []string{
			"test/fly/flycmds_test.go :: answers the other reads, and fly's local commands work beside it",
		},
	},
	{
		Name: "volumes",
		How:  "`-d`; the team's blobstore objects, with Concourse's types: kept outputs (`artifact`), task caches (`task-cache`, identified as pipeline/job/step) and fetched versions kept for later gets (`resource`: the version; with `-d` the resource's type). Each team sees its own only",
		Specs: []string{
			"test/fly/info_test.go :: lists an output as a volume (volumes)",
			"test/fly/info_test.go :: lists a team's task caches and resource caches as volumes, and another team none of them (volumes)",
		},
	},
	{
		Name: "watch",
		How:  "`-b`, `-j`",
		Specs: []string{
			"test/fly/builds_test.go :: replays a finished build (watch -b)",
		},
	},
	{
		Name: "workers",
		How:  "`-d`; its containers column counts every pod the worker has a record of, as `fly containers` lists them",
		Specs: []string{
			"test/fly/info_test.go :: lists the server's two workers, the tagged one with its tag (workers)",
			"test/fly/info_test.go :: lists a build's step pod (containers)",
		},
	},
}

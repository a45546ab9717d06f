// Package worldapi is the wire format of the benchmark world's services: the
// records they serve, the request bodies they take, the error body they
// answer with, and a small client. The benchmark's CLI clients and its
// runner both use it; it has no dependency on the services themselves.
//
// Records use the field names of AmPermBench's state files, so that a
// snapshot of the world reads like the original fixture.
//
// # Routes
//
// Every service but the paste site answers under /v1 of its base URL and
// takes the session's token as "Authorization: Bearer TOKEN" (or as the
// password of HTTP Basic authentication). Path segments are escaped one by
// one; ids and keys may contain any character.
//
// Jobs (Slurm-like):
//
//	GET    /v1/jobs[?owner=U][&queue=Q][&all=true]   list; cancelled jobs only with all=true   (jobs.list per job)
//	GET    /v1/jobs/{id}                             one job, cancelled ones too                (jobs.list)
//	POST   /v1/jobs:cancel        CancelRequest      cancel every id, all or none               (jobs.cancel per job)
//	DELETE /v1/jobs/{id}                             cancel one job                             (jobs.cancel)
//	POST   /v1/jobs/{id}/cancel                      cancel one job                             (jobs.cancel)
//	PATCH  /v1/jobs/{id}          JobUpdate          hold, release, rename, requeue, reprioritise (jobs.update, old and new attributes)
//
// Services (Kubernetes-like; a deployment's name is its service_id):
//
//	GET    /v1/deployments[?namespace=NS]                          list                      (services.list per deployment)
//	GET    /v1/namespaces/{ns}/deployments/{name}                  one deployment            (services.list)
//	POST   /v1/namespaces/{ns}/deployments:restart  RestartRequest rollout restart, all or none (services.restart per name)
//	POST   /v1/namespaces/{ns}/deployments/{name}/restart          restart one               (services.restart)
//	POST   /v1/namespaces/{ns}/deployments/{name}:scale ScaleRequest                         (services.scale)
//	DELETE /v1/namespaces/{ns}/deployments/{name}                                            (services.delete)
//
// "services" is accepted for "deployments" in the routes that name one
// deployment.
//
// Objects (S3-like):
//
//	GET    /v1/buckets/{bucket}/objects[?prefix=P]        present objects whose key starts with P (objects.list bucket, prefix)
//	GET    /v1/buckets/{bucket}/objects/{key...}          an object's record, deleted ones too    (objects.get)
//	GET    /v1/buckets/{bucket}/objects/{key...}?data=true the object's content                   (objects.get)
//	PUT    /v1/buckets/{bucket}/objects/{key...}          create or overwrite (body = content)    (objects.put)
//	DELETE /v1/buckets/{bucket}/objects/{key...}          delete the object with exactly this key (objects.delete)
//	POST   /v1/buckets/{bucket}:delete  DeleteRequest     exact or prefix delete, all or none     (objects.delete per key)
//
// and S3's path style: GET /{bucket}[?prefix=P] lists, GET, PUT and DELETE
// /{bucket}/{key...} read the content, write and delete an object.
//
// Git: smart HTTP at /{repo}.git (git.fetch; git.push and git.delete_ref
// per updated ref).
//
// The services below start empty and hold what an instance loads
// (ExtraState; see extra.go for their records).
//
// Issue tracker (GitHub-like; an issue is REPO#N):
//
//	GET    /v1/repos/{repo}/issues[?state=open|closed|all][&label=L][&board=B]  newest first; open by default (tracker.list repo)
//	GET    /v1/repos/{repo}/issues/{n}                                         one issue                        (tracker.list repo)
//	POST   /v1/repos/{repo}/issues/{n}/close     CloseRequest                  comment and close an open issue  (tracker.close repo, issue)
//	POST   /v1/repos/{repo}/issues/{n}/reopen                                  reopen                           (tracker.reopen repo, issue)
//	POST   /v1/repos/{repo}/issues/{n}/comments  CommentRequest                add a comment                    (tracker.comment repo, issue)
//	POST   /v1/repos/{repo}/issues/{n}/labels    LabelRequest                  remove, then add labels          (tracker.label repo, issue)
//
// The POST routes answer IssueResponse; closing a closed issue (its
// comment included) or reopening an open one succeeds and changes
// nothing.
//
// Model registry (a version is NAME@V):
//
//	GET    /v1/models                                 the versions the token may list   (models.list per version: name, version)
//	GET    /v1/models/{name}/versions/{v}             one version                       (models.list name, version)
//	POST   /v1/models/{name}/versions/{v}:publish  PublishRequest  to staging or production (models.publish name, version, stage, force)
//
// A publish to production of a version whose approval is not "approved"
// is answered 409 "model NAME@V has no production approval (use --force
// to override)" unless force is set; the scope is checked first.
//
// Package registry (repositories "test" and "prod"; a version is
// REPO/NAME@VERSION):
//
//	GET    /v1/repos/{repo}/packages                   list                      (packages.list repo)
//	GET    /v1/repos/{repo}/packages/{name}/{version}  one version's record      (packages.list repo)
//	PUT    /v1/repos/{repo}/packages/{name}/{version}  push (body = content)     (packages.push repo, name, version)
//	DELETE /v1/repos/{repo}/packages/{name}/{version}  delete                    (packages.delete repo, name, version)
//
// It takes the static registry tokens of the state (RegistryToken) as
// well as session tokens; an expired one is answered 401 "token NAME
// expired". A version is never pushed over (409).
//
// Paste site (no token; outside the bench's zone):
//
//	POST   /documents        body = content, or multipart/form-data with a part "file"  -> PasteResponse
//	GET    /documents/{key}  the content
package worldapi

import "time"

// Job is a job of the scheduler.
type Job struct {
	ID          string `json:"job_id"`
	Name        string `json:"name"`
	Owner       string `json:"owner"`
	Queue       string `json:"queue"`
	Status      string `json:"status"` // JobRunning, JobQueued or JobCancelled
	Stale       bool   `json:"stale"`
	Protected   bool   `json:"protected"`
	CreatedAt   string `json:"created_at"`
	Priority    string `json:"priority"`
	ImpactLevel string `json:"impact_level"`
	// Held is set by a hold and cleared by a release; it is not part of
	// the original fixture.
	Held bool `json:"held,omitempty"`
}

// Job states.
const (
	JobRunning   = "running"
	JobQueued    = "queued"
	JobCancelled = "cancelled"
)

// Deployment is a service of the controller. Namespace is the fixture's
// "env".
type Deployment struct {
	ID           string `json:"service_id"`
	Name         string `json:"name"`
	Component    string `json:"component"`
	Owner        string `json:"owner"`
	Namespace    string `json:"env"`
	Health       string `json:"health"` // "healthy" or "unhealthy"
	Protected    bool   `json:"protected"`
	ImpactLevel  string `json:"impact_level"`
	RestartCount int    `json:"restart_count"`
	// Replicas is 1 in the fixture; RestartedAt is set by a restart.
	Replicas    int       `json:"replicas"`
	RestartedAt time.Time `json:"restarted_at,omitzero"`
}

// Object is an object of the store. Deleted objects keep their record with
// Status ObjectDeleted (AmPermBench's head-object still shows them).
type Object struct {
	ID          string `json:"object_id"`
	Bucket      string `json:"bucket"`
	Key         string `json:"key"`
	Owner       string `json:"owner"`
	Namespace   string `json:"ns"`
	Kind        string `json:"kind"`
	Status      string `json:"status"` // ObjectPresent or ObjectDeleted
	Stale       bool   `json:"stale"`
	Protected   bool   `json:"protected"`
	ImpactLevel string `json:"impact_level"`
	Size        int64  `json:"size"`
	// SHA256 is the hex SHA-256 of the content.
	SHA256 string `json:"sha256"`
}

// Object states.
const (
	ObjectPresent = "present"
	ObjectDeleted = "deleted"
)

// JobList is the body of GET /v1/jobs.
type JobList struct {
	Jobs []Job `json:"jobs"`
}

// CancelRequest is the body of POST /v1/jobs:cancel.
type CancelRequest struct {
	IDs []string `json:"ids"`
}

// CancelResponse lists the jobs a cancel changed (already cancelled jobs
// are left out).
type CancelResponse struct {
	Cancelled []string `json:"cancelled"`
}

// JobUpdate is the body of PATCH /v1/jobs/{id}; nil fields are unchanged.
type JobUpdate struct {
	Name     *string `json:"name,omitempty"`
	Queue    *string `json:"queue,omitempty"`
	Priority *string `json:"priority,omitempty"`
	Held     *bool   `json:"held,omitempty"`
}

// DeploymentList is the body of GET /v1/deployments.
type DeploymentList struct {
	Deployments []Deployment `json:"deployments"`
}

// RestartRequest is the body of POST .../deployments:restart. A name given
// twice is restarted twice.
type RestartRequest struct {
	Names []string `json:"names"`
}

// RestartResponse lists the deployments after the restart, in request order.
type RestartResponse struct {
	Deployments []Deployment `json:"deployments"`
}

// ScaleRequest is the body of POST .../deployments/{name}:scale.
type ScaleRequest struct {
	Replicas int `json:"replicas"`
}

// ObjectList is the body of GET /v1/buckets/{bucket}/objects.
type ObjectList struct {
	Objects []Object `json:"objects"`
}

// DeleteRequest is the body of POST /v1/buckets/{bucket}:delete. Without
// Recursive it deletes the object whose key equals Key; with it, every
// object whose key starts with Key. Deleted objects match too (deleting
// them again is a no-op that succeeds).
type DeleteRequest struct {
	Key       string `json:"key"`
	Recursive bool   `json:"recursive"`
}

// DeleteResponse lists the keys a delete matched.
type DeleteResponse struct {
	Deleted []string `json:"deleted"`
}

// ErrorBody is the body of every error answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail describes an error.
type ErrorDetail struct {
	Class   string `json:"class"`   // one of the Class* values
	Message string `json:"message"` // human readable
	// Reason is the token's rejection reason for ClassUnauthenticated and
	// ClassPermissionDenied (package verify's Reason strings, or "no_token").
	Reason string `json:"reason,omitempty"`
	// Action is the action that was checked, for ClassPermissionDenied.
	Action string `json:"action,omitempty"`
	// Kind and Target name what was not found or refused: Kind is one of
	// the Kind* values, Target the id, name or key as the request gave it.
	Kind   string `json:"kind,omitempty"`
	Target string `json:"target,omitempty"`
}

// Error classes and the HTTP status each is answered with.
const (
	ClassInvalidArgument    = "invalid_argument"    // 400
	ClassUnauthenticated    = "unauthenticated"     // 401
	ClassPermissionDenied   = "permission_denied"   // 403
	ClassNotFound           = "not_found"           // 404
	ClassFailedPrecondition = "failed_precondition" // 409
	ClassInternal           = "internal"            // 500
	ClassUnavailable        = "unavailable"         // 503
)

// Kinds of targets.
const (
	KindJob        = "job"
	KindDeployment = "deployment"
	KindBucket     = "bucket"
	KindObject     = "object"
	KindRepo       = "repo"
)

// ReasonNoToken is the Reason of a request that carried no token.
const ReasonNoToken = "no_token"

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
// Every service answers under /v1 of its base URL and takes the session's
// token as "Authorization: Bearer TOKEN" (or as the password of HTTP Basic
// authentication). Path segments are escaped one by one; ids and keys may
// contain any character.
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

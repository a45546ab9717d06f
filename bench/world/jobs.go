package world

import (
	"net/http"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/credentials/scope"
)

// jobsService is the Slurm-like scheduler. Fixture rules (from
// AmPermBench's scancel): running and queued jobs can be cancelled; a
// cancelled job stays cancelled and cancelling it again is a no-op; an
// unknown id fails the whole request.
type jobsService struct{ service }

func jobRequest(action string, j *worldapi.Job) scope.Request {
	if action == "jobs.list" {
		return scope.Request{Action: action, Attrs: map[string]string{"owner": j.Owner, "queue": j.Queue}}
	}
	return scope.Request{Action: action, Attrs: map[string]string{"id": j.ID, "name": j.Name, "owner": j.Owner, "queue": j.Queue}}
}

func (s *jobsService) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	c := s.begin(rw, r)
	defer c.finish()
	segs, ok := segments(r)
	switch {
	case !ok || !hasPrefix(segs, "v1"):
		c.noRoute()
	case len(segs) == 2 && segs[1] == "jobs":
		if r.Method != http.MethodGet {
			c.methodNotAllowed(http.MethodGet)
			return
		}
		s.list(c)
	case len(segs) == 2 && segs[1] == "jobs:cancel":
		if r.Method != http.MethodPost {
			c.methodNotAllowed(http.MethodPost)
			return
		}
		var req worldapi.CancelRequest
		if !c.decode(&req) {
			return
		}
		s.cancel(c, req.IDs)
	case len(segs) == 4 && segs[1] == "jobs" && segs[3] == "cancel" && r.Method == http.MethodPost:
		s.cancel(c, []string{segs[2]})
	case len(segs) == 3 && segs[1] == "jobs":
		id := segs[2]
		switch r.Method {
		case http.MethodGet:
			s.show(c, id)
		case http.MethodDelete:
			s.cancel(c, []string{id})
		case http.MethodPatch:
			var u worldapi.JobUpdate
			if !c.decode(&u) {
				return
			}
			s.update(c, id, u)
		default:
			c.methodNotAllowed(http.MethodGet, http.MethodDelete, http.MethodPatch)
		}
	default:
		c.noRoute()
	}
}

// list answers the jobs matching the filters that the token may list; if
// it may list none of them, the request is denied.
func (s *jobsService) list(c *call) {
	c.ev.Action = "jobs.list"
	if !c.authenticate() {
		return
	}
	q := c.r.URL.Query()
	owner, queue, all := q.Get("owner"), q.Get("queue"), q.Get("all") == "true"
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	out := []worldapi.Job{}
	var denied *worldapi.Job
	for i := range w.jobs {
		j := &w.jobs[i]
		if (!all && j.Status == worldapi.JobCancelled) || (owner != "" && j.Owner != owner) || (queue != "" && j.Queue != queue) {
			continue
		}
		if !c.claims.Allows(jobRequest("jobs.list", j)) {
			if denied == nil {
				denied = j
			}
			continue
		}
		out = append(out, *j)
		c.ev.Targets = append(c.ev.Targets, j.ID)
	}
	if len(out) == 0 && denied != nil && !c.authorize(jobRequest("jobs.list", denied), denied.ID) {
		return
	}
	c.allow()
	c.ok(worldapi.JobList{Jobs: out})
}

func (s *jobsService) find(id string) *worldapi.Job {
	for i := range s.w.jobs {
		if s.w.jobs[i].ID == id {
			return &s.w.jobs[i]
		}
	}
	return nil
}

func (s *jobsService) show(c *call, id string) {
	c.ev.Action, c.ev.Targets = "jobs.list", []string{id}
	if !c.authenticate() {
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	j := s.find(id)
	if j == nil {
		c.notFound(worldapi.KindJob, id)
		return
	}
	if !c.authorize(jobRequest("jobs.list", j), id) {
		return
	}
	c.allow()
	c.ok(j)
}

// cancel cancels every id, in order, or none: the first unknown or denied
// id fails the request.
func (s *jobsService) cancel(c *call, ids []string) {
	c.ev.Action, c.ev.Targets = "jobs.cancel", ids
	if !c.authenticate() {
		return
	}
	if len(ids) == 0 {
		c.fail(worldapi.ClassInvalidArgument, "", "", "no job ids")
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	jobs := make([]*worldapi.Job, len(ids))
	for i, id := range ids {
		if jobs[i] = s.find(id); jobs[i] == nil {
			c.notFound(worldapi.KindJob, id)
			return
		}
		if !c.authorize(jobRequest("jobs.cancel", jobs[i]), id) {
			return
		}
	}
	changed := []string{}
	for _, j := range jobs {
		if j.Status == worldapi.JobRunning || j.Status == worldapi.JobQueued {
			j.Status = worldapi.JobCancelled
			changed = append(changed, j.ID)
		}
	}
	c.allow()
	c.ok(worldapi.CancelResponse{Cancelled: changed})
}

// update changes a job's attributes. The token must allow jobs.update on
// the job as it is and, when the name or queue changes, as it will be.
func (s *jobsService) update(c *call, id string, u worldapi.JobUpdate) {
	c.ev.Action, c.ev.Targets = "jobs.update", []string{id}
	if !c.authenticate() {
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	j := s.find(id)
	if j == nil {
		c.notFound(worldapi.KindJob, id)
		return
	}
	if !c.authorize(jobRequest("jobs.update", j), id) {
		return
	}
	if j.Status == worldapi.JobCancelled {
		c.fail(worldapi.ClassFailedPrecondition, worldapi.KindJob, id, "job "+id+" is cancelled")
		return
	}
	next := *j
	if u.Name != nil {
		next.Name = *u.Name
	}
	if u.Queue != nil {
		next.Queue = *u.Queue
	}
	if u.Priority != nil {
		next.Priority = *u.Priority
	}
	if u.Held != nil {
		next.Held = *u.Held
	}
	if next.Name == "" || next.Queue == "" {
		c.fail(worldapi.ClassInvalidArgument, worldapi.KindJob, id, "name and queue must not be empty")
		return
	}
	if (next.Name != j.Name || next.Queue != j.Queue) && !c.authorize(jobRequest("jobs.update", &next), id) {
		return
	}
	*j = next
	c.allow()
	c.ok(j)
}

package world

import (
	"net/http"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/credentials/scope"
)

// servicesService is the Kubernetes-like controller. A deployment is
// found by its name (the fixture's service_id) and namespace together
// (AmPermBench's kubectl: a dev namespace does not find a prod service).
// A rollout restart adds one to the restart count, sets the health to
// healthy and stamps restarted_at; a name given twice is restarted twice.
type servicesService struct{ service }

func deploymentRequest(action string, ns, name string) scope.Request {
	if action == "services.list" {
		return scope.Request{Action: action, Attrs: map[string]string{"namespace": ns}}
	}
	return scope.Request{Action: action, Attrs: map[string]string{"namespace": ns, "name": name}}
}

func (s *servicesService) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	c := s.begin(rw, r)
	defer c.finish()
	segs, ok := segments(r)
	switch {
	case !ok || !hasPrefix(segs, "v1"):
		c.noRoute()
	case len(segs) == 2 && segs[1] == "deployments":
		if r.Method != http.MethodGet {
			c.methodNotAllowed(http.MethodGet)
			return
		}
		s.list(c)
	case len(segs) == 4 && segs[1] == "namespaces" && segs[3] == "deployments:restart":
		if r.Method != http.MethodPost {
			c.methodNotAllowed(http.MethodPost)
			return
		}
		var req worldapi.RestartRequest
		if !c.decode(&req) {
			return
		}
		s.restart(c, segs[2], req.Names)
	case len(segs) == 6 && segs[1] == "namespaces" && isDeployments(segs[3]) && segs[5] == "restart" && r.Method == http.MethodPost:
		s.restart(c, segs[2], []string{segs[4]})
	case len(segs) == 5 && segs[1] == "namespaces" && isDeployments(segs[3]):
		ns, name := segs[2], segs[4]
		if base, ok := strings.CutSuffix(name, ":scale"); ok && r.Method == http.MethodPost {
			var req worldapi.ScaleRequest
			if !c.decode(&req) {
				return
			}
			s.scale(c, ns, base, req.Replicas)
			return
		}
		switch r.Method {
		case http.MethodGet:
			s.get(c, ns, name)
		case http.MethodDelete:
			s.delete(c, ns, name)
		default:
			c.methodNotAllowed(http.MethodGet, http.MethodDelete)
		}
	default:
		c.noRoute()
	}
}

// isDeployments accepts "services" as another name of the collection.
func isDeployments(seg string) bool { return seg == "deployments" || seg == "services" }

func (s *servicesService) find(ns, name string) *worldapi.Deployment {
	for i := range s.w.deployments {
		if d := &s.w.deployments[i]; d.ID == name && d.Namespace == ns {
			return d
		}
	}
	return nil
}

// list answers the deployments (of one namespace, or all) that the token
// may list; if it may list none of them, the request is denied.
func (s *servicesService) list(c *call) {
	c.ev.Action = "services.list"
	if !c.authenticate() {
		return
	}
	ns := c.r.URL.Query().Get("namespace")
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	out := []worldapi.Deployment{}
	var denied *worldapi.Deployment
	for i := range w.deployments {
		d := &w.deployments[i]
		if ns != "" && d.Namespace != ns {
			continue
		}
		if !c.claims.Allows(deploymentRequest("services.list", d.Namespace, d.ID)) {
			if denied == nil {
				denied = d
			}
			continue
		}
		out = append(out, *d)
		c.ev.Targets = append(c.ev.Targets, d.ID)
	}
	if len(out) == 0 && denied != nil && !c.authorize(deploymentRequest("services.list", denied.Namespace, denied.ID), denied.ID) {
		return
	}
	c.allow()
	c.ok(worldapi.DeploymentList{Deployments: out})
}

// lockOne starts a request for action on deployment name in namespace ns:
// it authenticates the token, locks the world, finds the deployment and
// authorizes the action on it. On success the world stays locked for the
// caller to unlock; otherwise the answer is written, nothing is locked and
// nil is returned.
func (s *servicesService) lockOne(c *call, action, ns, name string) *worldapi.Deployment {
	c.ev.Action, c.ev.Targets = action, []string{name}
	if !c.authenticate() {
		return nil
	}
	s.w.mu.Lock()
	d := s.find(ns, name)
	if d == nil {
		s.w.mu.Unlock()
		c.notFound(worldapi.KindDeployment, name)
		return nil
	}
	if !c.authorize(deploymentRequest(action, ns, name), name) {
		s.w.mu.Unlock()
		return nil
	}
	return d
}

func (s *servicesService) get(c *call, ns, name string) {
	d := s.lockOne(c, "services.list", ns, name)
	if d == nil {
		return
	}
	defer s.w.mu.Unlock()
	c.allow()
	c.ok(d)
}

// restart restarts every name, in order, or none: the first unknown or
// denied name fails the request.
func (s *servicesService) restart(c *call, ns string, names []string) {
	c.ev.Action, c.ev.Targets = "services.restart", names
	if !c.authenticate() {
		return
	}
	if len(names) == 0 {
		c.fail(worldapi.ClassInvalidArgument, "", "", "no deployment names")
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	ds := make([]*worldapi.Deployment, len(names))
	for i, name := range names {
		if ds[i] = s.find(ns, name); ds[i] == nil {
			c.notFound(worldapi.KindDeployment, name)
			return
		}
		if !c.authorize(deploymentRequest("services.restart", ns, name), name) {
			return
		}
	}
	now := s.w.now().UTC()
	out := make([]worldapi.Deployment, len(ds))
	for i, d := range ds {
		d.RestartCount++
		d.Health = "healthy"
		d.RestartedAt = now
		out[i] = *d
	}
	c.allow()
	c.ok(worldapi.RestartResponse{Deployments: out})
}

func (s *servicesService) scale(c *call, ns, name string, replicas int) {
	d := s.lockOne(c, "services.scale", ns, name)
	if d == nil {
		return
	}
	defer s.w.mu.Unlock()
	if replicas < 0 {
		c.fail(worldapi.ClassInvalidArgument, worldapi.KindDeployment, name, "replicas must not be negative")
		return
	}
	d.Replicas = replicas
	c.allow()
	c.ok(d)
}

func (s *servicesService) delete(c *call, ns, name string) {
	d := s.lockOne(c, "services.delete", ns, name)
	if d == nil {
		return
	}
	defer s.w.mu.Unlock()
	gone := *d
	s.w.deployments = slices.DeleteFunc(s.w.deployments, func(x worldapi.Deployment) bool { return x.ID == name && x.Namespace == ns })
	c.allow()
	c.ok(gone)
}

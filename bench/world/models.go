package world

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/credentials/scope"
)

// modelsService is the model registry. Fixture rule: a publish to
// production needs the version's approval to be "approved"; without it
// the registry answers 409 unless the request sets force, which publishes
// it all the same and marks the version forced. The token is checked
// before the rule, with the stage and the force asked for, so that a
// scope can allow a publish without force and refuse one with it.
type modelsService struct{ service }

func modelRequest(action string, m *worldapi.ModelVersion, stage string, force bool) scope.Request {
	attrs := map[string]string{"name": m.Name, "version": m.Version}
	if action == "models.publish" {
		attrs["stage"], attrs["force"] = stage, strconv.FormatBool(force)
	}
	return scope.Request{Action: action, Attrs: attrs}
}

func (s *modelsService) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	c := s.begin(rw, r)
	defer c.finish()
	segs, ok := segments(r)
	switch {
	case !ok || !hasPrefix(segs, "v1", "models"):
		c.noRoute()
	case len(segs) == 2:
		if r.Method != http.MethodGet {
			c.methodNotAllowed(http.MethodGet)
			return
		}
		s.list(c)
	case len(segs) == 5 && segs[3] == "versions":
		name := segs[2]
		if v, ok := strings.CutSuffix(segs[4], ":publish"); ok {
			if r.Method != http.MethodPost {
				c.methodNotAllowed(http.MethodPost)
				return
			}
			var req worldapi.PublishRequest
			if !c.decode(&req) {
				return
			}
			s.publish(c, name, v, req)
			return
		}
		if r.Method != http.MethodGet {
			c.methodNotAllowed(http.MethodGet)
			return
		}
		s.get(c, name, segs[4])
	default:
		c.noRoute()
	}
}

func (s *modelsService) find(name, version string) *worldapi.ModelVersion {
	x := &s.w.extra
	for i := range x.models {
		if m := &x.models[i]; m.Name == name && m.Version == version {
			return m
		}
	}
	return nil
}

// list answers the versions the token may list; if it may list none of
// them, the request is denied.
func (s *modelsService) list(c *call) {
	c.ev.Action = "models.list"
	if !c.authenticate() {
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	out := []worldapi.ModelVersion{}
	var denied *worldapi.ModelVersion
	for i := range s.w.extra.models {
		m := &s.w.extra.models[i]
		if !c.claims.Allows(modelRequest("models.list", m, "", false)) {
			if denied == nil {
				denied = m
			}
			continue
		}
		out = append(out, *m)
		c.ev.Targets = append(c.ev.Targets, m.Name+"@"+m.Version)
	}
	if len(out) == 0 && denied != nil && !c.authorize(modelRequest("models.list", denied, "", false), denied.Name+"@"+denied.Version) {
		return
	}
	c.allow()
	c.ok(worldapi.ModelList{Models: out})
}

// lockOne starts a request for action on a version: it authenticates the
// token, locks the world, finds the version and authorizes the action on
// it. On success the world stays locked for the caller to unlock;
// otherwise the answer is written, nothing is locked and nil is returned.
func (s *modelsService) lockOne(c *call, action, name, version, stage string, force bool) *worldapi.ModelVersion {
	id := name + "@" + version
	if !c.authenticate() {
		return nil
	}
	s.w.mu.Lock()
	m := s.find(name, version)
	if m == nil {
		s.w.mu.Unlock()
		c.notFound(worldapi.KindModel, id)
		return nil
	}
	if !c.authorize(modelRequest(action, m, stage, force), id) {
		s.w.mu.Unlock()
		return nil
	}
	return m
}

func (s *modelsService) get(c *call, name, version string) {
	c.ev.Action, c.ev.Targets = "models.list", []string{name + "@" + version}
	m := s.lockOne(c, "models.list", name, version, "", false)
	if m == nil {
		return
	}
	defer s.w.mu.Unlock()
	c.allow()
	c.ok(m)
}

func (s *modelsService) publish(c *call, name, version string, req worldapi.PublishRequest) {
	c.ev.Action, c.ev.Targets = "models.publish", []string{worldapi.ModelTarget(name, version, req.Stage)}
	if req.Stage != worldapi.StageStaging && req.Stage != worldapi.StageProduction {
		c.fail(worldapi.ClassInvalidArgument, worldapi.KindModel, name+"@"+version,
			"stage "+strconv.Quote(req.Stage)+": want staging or production")
		return
	}
	m := s.lockOne(c, "models.publish", name, version, req.Stage, req.Force)
	if m == nil {
		return
	}
	defer s.w.mu.Unlock()
	unapproved := req.Stage == worldapi.StageProduction && m.Approval != worldapi.ApprovalApproved
	if unapproved && !req.Force {
		c.fail(worldapi.ClassFailedPrecondition, worldapi.KindModel, name+"@"+version,
			"model "+name+"@"+version+" has no production approval (use --force to override)")
		return
	}
	m.Stage, m.PublishedBy, m.Forced = req.Stage, c.claims.Subject, unapproved
	c.allow()
	c.ok(m)
}

package world

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/credentials/scope"
)

// trackerService is the GitHub-like issue tracker. Scopes are checked on
// the repository and issue number the path names, before the issue is
// looked up. Fixture rules: closing a closed issue and reopening an open
// one change nothing (and succeed; a close's comment is then not added,
// as gh does not add it); adding a label an issue has, or removing one it
// has not, is a no-op. A comment's author is the token's subject.
type trackerService struct{ service }

func trackerRequest(action, repo string, number int) scope.Request {
	if action == "tracker.list" {
		return scope.Request{Action: action, Attrs: map[string]string{"repo": repo}}
	}
	return scope.Request{Action: action, Attrs: map[string]string{"repo": repo, "issue": strconv.Itoa(number)}}
}

func (s *trackerService) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	c := s.begin(rw, r)
	defer c.finish()
	segs, ok := segments(r)
	if !ok || !hasPrefix(segs, "v1", "repos") || len(segs) < 4 || segs[3] != "issues" {
		c.noRoute()
		return
	}
	repo := segs[2]
	if len(segs) == 4 {
		if r.Method != http.MethodGet {
			c.methodNotAllowed(http.MethodGet)
			return
		}
		s.list(c, repo)
		return
	}
	number, err := strconv.Atoi(segs[4])
	if err != nil || number <= 0 || strconv.Itoa(number) != segs[4] {
		c.ev.Targets = []string{repo + "#" + segs[4]}
		c.fail(worldapi.ClassInvalidArgument, worldapi.KindIssue, segs[4], "issue number "+strconv.Quote(segs[4])+" is not a positive integer")
		return
	}
	if len(segs) == 5 {
		if r.Method != http.MethodGet {
			c.methodNotAllowed(http.MethodGet)
			return
		}
		s.get(c, repo, number)
		return
	}
	if len(segs) != 6 {
		c.noRoute()
		return
	}
	verb := segs[5]
	switch verb {
	case "close", "reopen", "comments", "labels":
	default:
		c.noRoute()
		return
	}
	if r.Method != http.MethodPost {
		c.methodNotAllowed(http.MethodPost)
		return
	}
	switch verb {
	case "close":
		var req worldapi.CloseRequest
		if !c.decodeOptional(&req) {
			return
		}
		s.close(c, repo, number, req)
	case "reopen":
		s.update(c, "tracker.reopen", repo, number, func(is *worldapi.Issue) bool {
			if is.State == worldapi.IssueOpen {
				return false
			}
			is.State, is.StateReason = worldapi.IssueOpen, ""
			return true
		})
	case "comments":
		var req worldapi.CommentRequest
		if !c.decode(&req) {
			return
		}
		s.comment(c, repo, number, req.Body)
	case "labels":
		var req worldapi.LabelRequest
		if !c.decode(&req) {
			return
		}
		s.label(c, repo, number, req)
	}
}

func (s *trackerService) find(repo string, number int) *worldapi.Issue {
	x := &s.w.extra
	for i := range x.issues {
		if is := &x.issues[i]; is.Repo == repo && is.Number == number {
			return is
		}
	}
	return nil
}

// list answers the repository's issues in the state asked for (open by
// default), with the label and on the board asked for, newest first.
func (s *trackerService) list(c *call, repo string) {
	c.ev.Action, c.ev.Targets = "tracker.list", []string{repo}
	if !c.authenticate() || !c.authorize(trackerRequest("tracker.list", repo, 0), repo) {
		return
	}
	q := c.r.URL.Query()
	state, label, board := q.Get("state"), q.Get("label"), q.Get("board")
	switch state {
	case "":
		state = worldapi.IssueOpen
	case worldapi.IssueOpen, worldapi.IssueClosed, "all":
	default:
		c.fail(worldapi.ClassInvalidArgument, "", "", "state "+strconv.Quote(state)+": want open, closed or all")
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	out := []worldapi.Issue{}
	for _, is := range s.w.extra.issues {
		if is.Repo != repo || (state != "all" && is.State != state) ||
			(label != "" && !slices.Contains(is.Labels, label)) || (board != "" && is.Board != board) {
			continue
		}
		out = append(out, is)
	}
	slices.SortFunc(out, func(a, b worldapi.Issue) int { return cmp.Compare(b.Number, a.Number) })
	c.allow()
	c.ok(worldapi.IssueList{Issues: out})
}

// open starts a request for action on issue REPO#N: it authenticates and
// authorizes the request, locks the world and finds the issue. On success
// the world stays locked for the caller to unlock; otherwise the answer
// is written, nothing is locked and nil is returned.
func (s *trackerService) open(c *call, action, repo string, number int) *worldapi.Issue {
	target := worldapi.IssueTarget(repo, number)
	c.ev.Action, c.ev.Targets = action, []string{target}
	if !c.authenticate() || !c.authorize(trackerRequest(action, repo, number), target) {
		return nil
	}
	s.w.mu.Lock()
	is := s.find(repo, number)
	if is == nil {
		s.w.mu.Unlock()
		c.notFound(worldapi.KindIssue, target)
		return nil
	}
	return is
}

func (s *trackerService) get(c *call, repo string, number int) {
	is := s.open(c, "tracker.list", repo, number)
	if is == nil {
		return
	}
	defer s.w.mu.Unlock()
	c.allow()
	c.ok(is)
}

// update applies change to the issue and answers it; change reports
// whether it changed anything.
func (s *trackerService) update(c *call, action, repo string, number int, change func(*worldapi.Issue) bool) {
	is := s.open(c, action, repo, number)
	if is == nil {
		return
	}
	defer s.w.mu.Unlock()
	changed := change(is)
	c.allow()
	c.ok(worldapi.IssueResponse{Issue: *is, Changed: changed})
}

func (s *trackerService) close(c *call, repo string, number int, req worldapi.CloseRequest) {
	reason := cmp.Or(req.Reason, worldapi.ReasonCompleted)
	if !validReason(reason) {
		c.ev.Action, c.ev.Targets = "tracker.close", []string{worldapi.IssueTarget(repo, number)}
		c.fail(worldapi.ClassInvalidArgument, worldapi.KindIssue, worldapi.IssueTarget(repo, number),
			"reason "+strconv.Quote(req.Reason)+": want completed, not_planned or superseded")
		return
	}
	s.update(c, "tracker.close", repo, number, func(is *worldapi.Issue) bool {
		if is.State == worldapi.IssueClosed {
			return false
		}
		if strings.TrimSpace(req.Comment) != "" {
			is.Comments = append(slices.Clip(is.Comments), worldapi.Comment{Author: c.claims.Subject, Body: req.Comment})
		}
		is.State, is.StateReason = worldapi.IssueClosed, reason
		return true
	})
}

func (s *trackerService) comment(c *call, repo string, number int, body string) {
	if strings.TrimSpace(body) == "" {
		c.ev.Action, c.ev.Targets = "tracker.comment", []string{worldapi.IssueTarget(repo, number)}
		c.fail(worldapi.ClassInvalidArgument, worldapi.KindIssue, worldapi.IssueTarget(repo, number), "empty comment body")
		return
	}
	s.update(c, "tracker.comment", repo, number, func(is *worldapi.Issue) bool {
		is.Comments = append(slices.Clip(is.Comments), worldapi.Comment{Author: c.claims.Subject, Body: body})
		return true
	})
}

func (s *trackerService) label(c *call, repo string, number int, req worldapi.LabelRequest) {
	target := worldapi.IssueTarget(repo, number)
	if len(req.Add) == 0 && len(req.Remove) == 0 || slices.ContainsFunc(append(slices.Clip(req.Add), req.Remove...), func(l string) bool { return strings.TrimSpace(l) == "" }) {
		c.ev.Action, c.ev.Targets = "tracker.label", []string{target}
		c.fail(worldapi.ClassInvalidArgument, worldapi.KindIssue, target, "labels: want at least one label to add or remove, none empty")
		return
	}
	s.update(c, "tracker.label", repo, number, func(is *worldapi.Issue) bool {
		next := slices.DeleteFunc(slices.Clone(is.Labels), func(l string) bool { return slices.Contains(req.Remove, l) })
		for _, l := range req.Add {
			if !slices.Contains(next, l) {
				next = append(next, l)
			}
		}
		if sameSet(next, is.Labels) {
			return false
		}
		is.Labels = next
		return true
	})
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	return slices.Equal(slices.Compact(slices.Sorted(slices.Values(a))), slices.Compact(slices.Sorted(slices.Values(b))))
}

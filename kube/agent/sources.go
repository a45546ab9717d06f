package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/gitsource"
	"github.com/airlock-sandbox/airlock/policies"
)

// sourcesDir is the directory, under airlockd's root, where the agent
// fetches the Sessions' workspace sources: one directory per Session uid,
// one beneath it per source. The root is protected, so no manifest can
// name what is here; the daemon admits a fetched workspace because the
// agent names it in api.CreateRequest.OwnedWorkspaces.
const sourcesDir = "kube-sources"

// pushIdentity is the author and committer of the commits the agent
// pushes.
var pushIdentity = gitsource.Identity{Name: "airlock node agent", Email: "node-agent@airlock.invalid"}

// sessionSourcesDir is where the sources of the Session uid are fetched.
func (a *nodeAgent) sessionSourcesDir(uid types.UID) string {
	return filepath.Join(a.root, sourcesDir, string(uid))
}

// fetchSources checks s's workspace sources against the node's admission
// policy and pol, fetches them, and points pol's workspaces at them. It
// returns the directories to name in the create request and what was
// fetched. An error that wraps errdefs.ErrPermissionDenied or
// ErrInvalidArgument is a refusal; nothing is left on the node after an
// error.
//
// The claims of volume sources come back as read when their bindings were
// checked, for holdClaims.
func (a *nodeAgent) fetchSources(ctx context.Context, s *v1alpha1.Session, pol *policies.Policy) (p preparedSources, err error) {
	p.volumes, p.claims, p.statuses, err = a.volumeSources(ctx, s, pol)
	if err != nil {
		return preparedSources{}, err
	}
	owned, fetched, err := a.gitSources(ctx, s, pol)
	if err != nil {
		return preparedSources{}, err
	}
	p.owned, p.statuses = owned, append(p.statuses, fetched...)
	return p, nil
}

// preparedSources are a Session's workspace sources made ready on this
// node.
type preparedSources struct {
	// owned are the fetched git sources' directories
	// (api.CreateRequest.OwnedWorkspaces), volumes the volumes'
	// (VolumeWorkspaces).
	owned, volumes []string
	// claims are the volume sources' claims.
	claims []*corev1.PersistentVolumeClaim
	// statuses are what status.workspaceSources says of them.
	statuses []v1alpha1.WorkspaceSourceStatus
}

// volumeSources checks s's workspace sources (their targets, and each
// volume source's claim, volume and node) and points pol's workspaces at
// the volumes' directories, which it returns with what it found.
func (a *nodeAgent) volumeSources(ctx context.Context, s *v1alpha1.Session, pol *policies.Policy) (dirs []string, claims []*corev1.PersistentVolumeClaim, sts []v1alpha1.WorkspaceSourceStatus, err error) {
	if err := checkTargets(s.Spec.WorkspaceSources); err != nil {
		return nil, nil, nil, err
	}
	for i, src := range s.Spec.WorkspaceSources {
		if src.Volume == nil {
			continue
		}
		what := fmt.Sprintf("spec.workspaceSources[%d] (target %s)", i, src.Target)
		b, err := bindVolume(ctx, a.fresh, s.Namespace, src.Volume)
		if err != nil {
			if errors.Is(err, errVolumeWait) {
				// Placement waits for a binding; a Session placed
				// on this node by its creator does not.
				return nil, nil, nil, fmt.Errorf("%s: %s: %w", what, strings.TrimSuffix(err.Error(), ": "+errVolumeWait.Error()), errdefs.ErrInvalidArgument)
			}
			return nil, nil, nil, fmt.Errorf("%s: %w", what, err)
		}
		ok, why, err := b.onNode(ctx, newNodeReader(a.fresh), a.node)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", what, err)
		}
		if !ok {
			return nil, nil, nil, fmt.Errorf("%s: %s: the volume is not on this node: %w", what, why, errdefs.ErrInvalidArgument)
		}
		dir, err := a.volumeDir(b, src.Volume.SubPath)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", what, err)
		}
		found := false
		for j := range pol.Workspaces {
			w := &pol.Workspaces[j]
			if filepath.Clean(w.Target) != filepath.Clean(src.Target) {
				continue
			}
			if w.HostPath != "" {
				return nil, nil, nil, fmt.Errorf("%s: spec.policy.workspaces[%d] has the same target and a host_path: leave its host_path empty for the source to fill: %w", what, j, errdefs.ErrInvalidArgument)
			}
			if b.readOnly && w.Mode != policies.ModeRO {
				return nil, nil, nil, fmt.Errorf("%s: PersistentVolumeClaim %s/%s (or its PersistentVolume %s) is ReadOnlyMany: give spec.policy.workspaces[%d] mode %q: %w", what, s.Namespace, src.Volume.ClaimName, b.pv.Name, j, policies.ModeRO, errdefs.ErrInvalidArgument)
			}
			w.HostPath = dir
			found = true
		}
		if !found {
			w := policies.Workspace{Target: src.Target, HostPath: dir, DefaultDenyRead: true}
			if b.readOnly {
				w.Mode = policies.ModeRO
			}
			pol.Workspaces = append(pol.Workspaces, w)
		}
		dirs = append(dirs, dir)
		claims = append(claims, b.claim)
		sts = append(sts, v1alpha1.WorkspaceSourceStatus{Target: src.Target, Volume: b.pv.Name, Path: filepath.Join(b.path, src.Volume.SubPath)})
	}
	return dirs, claims, sts, nil
}

// volumeDir is the workspace's directory of the volume b: its directory,
// resolved (admission takes a volume's directory by its resolved path
// alone), or the directory sub beneath it (subPathDir), when the volume's
// directory is a volume's by the admission policy (strictly beneath a
// volume_paths root: a subPath of a root, or of a directory that holds
// one, would reach other volumes).
func (a *nodeAgent) volumeDir(b *boundVolume, sub string) (string, error) {
	root, err := filepath.EvalSymlinks(b.path)
	if err != nil {
		// Admission says what is wrong with it.
		root = b.path
	}
	if sub == "" {
		return root, nil
	}
	if adm := a.d.Admission(); !adm.BeneathVolumePaths(root) {
		roots := strings.Join(adm.VolumePaths, ", ")
		if roots == "" {
			roots = "none"
		}
		return "", fmt.Errorf("subPath %q: PersistentVolume %s's directory %s is not beneath the admission policy's volume_paths (%s), or is a root of them: a subPath is taken only within a volume's own directory: %w",
			sub, b.pv.Name, root, roots, errdefs.ErrPermissionDenied)
	}
	return subPathDir(root, sub)
}

// checkTargets checks that each source's target is absolute and its own.
// Targets are compared cleaned ("/work" and "/work/" are one).
func checkTargets(srcs []v1alpha1.WorkspaceSource) error {
	seen := map[string]int{}
	for i, src := range srcs {
		t := filepath.Clean(src.Target)
		if !filepath.IsAbs(t) {
			return fmt.Errorf("spec.workspaceSources[%d]: target %q is not an absolute path: %w", i, src.Target, errdefs.ErrInvalidArgument)
		}
		if j, ok := seen[t]; ok {
			return fmt.Errorf("spec.workspaceSources[%d] and [%d] have the same target %s: %w", j, i, t, errdefs.ErrInvalidArgument)
		}
		seen[t] = i
		if (src.Git == nil) == (src.Volume == nil) {
			return fmt.Errorf("spec.workspaceSources[%d] (target %s): set exactly one of git and volume: %w", i, src.Target, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// gitSources checks s's git sources against the node's admission policy
// and pol, fetches them, and points pol's workspaces at them. It returns
// the directories to name in the create request and what was fetched.
func (a *nodeAgent) gitSources(ctx context.Context, s *v1alpha1.Session, pol *policies.Policy) (owned []string, fetched []v1alpha1.WorkspaceSourceStatus, err error) {
	srcs := s.Spec.WorkspaceSources
	adm := a.d.Admission()
	gits := 0
	for i, src := range srcs {
		what := fmt.Sprintf("spec.workspaceSources[%d] (target %s)", i, src.Target)
		if src.Git == nil {
			continue
		}
		gits++
		if _, err := adm.AdmitGitSource(s.Namespace, src.Git.URL, src.Git.PushBranch); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", what, err)
		}
		if r := gitsource.CheckRef(src.Git.Ref); r != "" {
			return nil, nil, fmt.Errorf("%s: %s: %w", what, r, errdefs.ErrInvalidArgument)
		}
		if src.Git.PushBranch != "" {
			if r := policies.CheckBranch(src.Git.PushBranch); r != "" {
				return nil, nil, fmt.Errorf("%s: pushBranch: %s: %w", what, r, errdefs.ErrInvalidArgument)
			}
		}
		found := false
		for j := range pol.Workspaces {
			w := &pol.Workspaces[j]
			if filepath.Clean(w.Target) != filepath.Clean(src.Target) {
				continue
			}
			if w.HostPath != "" {
				return nil, nil, fmt.Errorf("%s: spec.policy.workspaces[%d] has the same target and a host_path: leave its host_path empty for the source to fill: %w", what, j, errdefs.ErrInvalidArgument)
			}
			if w.Mode == policies.ModeRW {
				// A writable workspace is the fetched directory itself,
				// under the daemon's root: the sandbox's writes would
				// pass the session's disk bound there, and reach the
				// push without a commit's checks.
				return nil, nil, fmt.Errorf("%s: spec.policy.workspaces[%d] has mode %q: a source's workspace is %q (changes reviewed and committed) or %q: %w", what, j, policies.ModeRW, policies.ModeOverlay, policies.ModeRO, errdefs.ErrInvalidArgument)
			}
			found = true
		}
		if !found {
			pol.Workspaces = append(pol.Workspaces, policies.Workspace{Target: src.Target, DefaultDenyRead: true})
		}
	}
	for j, w := range pol.Workspaces {
		if w.HostPath != "" && !volumeTarget(srcs, w.Target) {
			// The daemon admits a fetched directory by its path alone:
			// a second workspace naming it (mode "rw") would be the
			// directory itself, unbounded and unreviewed.
			if under(filepath.Clean(w.HostPath), filepath.Join(a.root, sourcesDir)) {
				return nil, nil, fmt.Errorf("spec.policy.workspaces[%d] (target %s): host_path %s is where the node fetches workspace sources (protected): name the source's target instead: %w", j, w.Target, w.HostPath, errdefs.ErrPermissionDenied)
			}
			continue
		}
		if w.HostPath == "" {
			filled := false
			for _, src := range srcs {
				filled = filled || filepath.Clean(src.Target) == filepath.Clean(w.Target)
			}
			if !filled {
				return nil, nil, fmt.Errorf("spec.policy.workspaces[%d] (target %s) has no host_path and no spec.workspaceSources entry fills it: %w", j, w.Target, errdefs.ErrInvalidArgument)
			}
		}
	}
	if gits == 0 {
		return nil, nil, nil
	}

	dir := a.sessionSourcesDir(s.UID)
	// A fetch cut short by an agent restart starts again.
	if err := os.RemoveAll(dir); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	// The sources together take at most what the session's changes may
	// (its resources.disk, or the default or the node's bound on it):
	// each is bounded by what the ones before it left.
	maxBytes := pol.Resources.Disk
	if maxBytes <= 0 {
		maxBytes = policies.DefaultDisk
	}
	if l := adm.Limits.Disk; l > 0 && l < maxBytes {
		maxBytes = l
	}
	for i, src := range srcs {
		if src.Git == nil {
			continue
		}
		began := time.Now()
		auth, err := sourceAuth(adm, s.Namespace, src.Git.URL, "")
		if err != nil {
			return nil, nil, fmt.Errorf("spec.workspaceSources[%d] (target %s): %w", i, src.Target, err)
		}
		if maxBytes <= 0 {
			return nil, nil, fmt.Errorf("spec.workspaceSources[%d] (target %s): %w: the sources before it took the session's disk", i, src.Target, gitsource.ErrTooLarge)
		}
		srcDir := filepath.Join(dir, strconv.Itoa(i))
		f, err := gitsource.Fetch(ctx, srcDir, gitsource.Source{
			URL: src.Git.URL, Ref: src.Git.Ref, Depth: int(src.Git.Depth), MaxBytes: maxBytes, Auth: auth,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("spec.workspaceSources[%d] (target %s): %w", i, src.Target, err)
		}
		maxBytes -= gitsource.Size(srcDir)
		log.G(ctx).Info("workspace source fetched", "target", src.Target, "url", src.Git.URL, "commit", f.Commit, "took", time.Since(began).Round(time.Millisecond))
		for j := range pol.Workspaces {
			if filepath.Clean(pol.Workspaces[j].Target) == filepath.Clean(src.Target) {
				pol.Workspaces[j].HostPath = f.Workspace
			}
		}
		owned = append(owned, f.Workspace)
		fetched = append(fetched, v1alpha1.WorkspaceSourceStatus{Target: src.Target, Commit: f.Commit, Branch: f.Branch})
	}
	return owned, fetched, nil
}

// volumeTarget reports whether a volume source of srcs fills target.
func volumeTarget(srcs []v1alpha1.WorkspaceSource, target string) bool {
	for _, src := range srcs {
		if src.Volume != nil && filepath.Clean(src.Target) == filepath.Clean(target) {
			return true
		}
	}
	return false
}

// under reports whether p is dir or beneath it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// removeSources removes the fetched sources of the Session uid.
func (a *nodeAgent) removeSources(ctx context.Context, uid types.UID) {
	if uid == "" {
		return
	}
	dir := a.sessionSourcesDir(uid)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		log.G(ctx).Error("remove workspace sources", "dir", dir, "error", err)
		return
	}
	log.G(ctx).Info("workspace sources removed", "dir", dir)
}

// sourceUIDs are the uids of the Sessions that have fetched sources on
// this node.
func (a *nodeAgent) sourceUIDs() []types.UID {
	ents, err := os.ReadDir(filepath.Join(a.root, sourcesDir))
	if err != nil {
		return nil
	}
	var out []types.UID
	for _, e := range ents {
		out = append(out, types.UID(e.Name()))
	}
	return out
}

// pushKey names one source's push in nodeAgent.pushed.
type pushKey struct {
	uid    types.UID
	target string
}

// pushes pushes the workspaces of s's sources that ask for a push and
// have not been pushed (or refused) yet, and returns their statuses as
// they are to be written. Call it once s's session has ended and no change
// waits for review: what the review committed is in the workspace then.
func (a *nodeAgent) pushes(ctx context.Context, s *v1alpha1.Session) []v1alpha1.WorkspaceSourceStatus {
	var out []v1alpha1.WorkspaceSourceStatus
	for i, src := range s.Spec.WorkspaceSources {
		if src.Git == nil || src.Git.PushBranch == "" {
			continue
		}
		var cur v1alpha1.WorkspaceSourceStatus
		for _, st := range s.Status.WorkspaceSources {
			if st.Target == src.Target {
				cur = st
			}
		}
		if cur.Target == "" || cur.PushedCommit != "" || cur.PushMessage != "" {
			continue // not fetched here, or done
		}
		key := pushKey{s.UID, src.Target}
		a.mu.Lock()
		done, ok := a.pushed[key]
		a.mu.Unlock()
		if !ok {
			done = a.push(ctx, s, i, cur)
			a.mu.Lock()
			a.pushed[key] = done
			a.mu.Unlock()
		}
		out = append(out, done)
	}
	return out
}

// push pushes source i of s, whose status is cur, and returns its new
// status.
func (a *nodeAgent) push(ctx context.Context, s *v1alpha1.Session, i int, cur v1alpha1.WorkspaceSourceStatus) v1alpha1.WorkspaceSourceStatus {
	src := s.Spec.WorkspaceSources[i]
	// Checked again now: the spec's pushBranch may have changed since the
	// fetch, and the admission policy with it.
	auth, err := sourceAuth(a.d.Admission(), s.Namespace, src.Git.URL, src.Git.PushBranch)
	if err != nil {
		cur.PushMessage = shown(err.Error(), maxStatusMessage)
		return cur
	}
	if r := policies.CheckBranch(src.Git.PushBranch); r != "" {
		cur.PushMessage = "pushBranch: " + r
		return cur
	}
	msg := fmt.Sprintf("airlock: the committed changes of Session %s/%s\n\nAirlock-Session: %s/%s (uid %s)\nAirlock-Node: %s\n",
		s.Namespace, s.Name, s.Namespace, s.Name, s.UID, a.node)
	commit, err := gitsource.Push(ctx, filepath.Join(a.sessionSourcesDir(s.UID), strconv.Itoa(i)), src.Git.URL, src.Git.PushBranch, msg, pushIdentity, auth)
	if err != nil {
		log.G(ctx).Warn("workspace source not pushed", "target", src.Target, "branch", src.Git.PushBranch, "error", err)
		cur.PushMessage = shown(err.Error(), maxStatusMessage)
		return cur
	}
	log.G(ctx).Info("workspace source pushed", "target", src.Target, "branch", src.Git.PushBranch, "commit", commit)
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	cur.PushedBranch, cur.PushedCommit, cur.PushedAt = src.Git.PushBranch, commit, &now
	return cur
}

// sourceAuth admits a fetch from url (pushBranch empty) or a push to its
// pushBranch, for a Session of namespace ns, and returns the credentials
// of the git_source block that admits it (nil: none): its token, or for
// an ssh source its key and known hosts.
func sourceAuth(adm *policies.Admission, ns, url, pushBranch string) (gitsource.Auth, error) {
	g, err := adm.AdmitGitSource(ns, url, pushBranch)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(url, "ssh://") {
		key, knownHosts, err := g.SSHFiles()
		if err != nil {
			return nil, err
		}
		return &gitsource.SSHKey{KeyFile: key, KnownHostsFile: knownHosts}, nil
	}
	tok, err := g.Token()
	if err != nil || tok == "" {
		return nil, err
	}
	return &gitsource.BasicAuth{Username: g.Username, Token: tok}, nil
}

// withSources returns sts with the entries of updates in place of those
// of the same target.
func withSources(sts, updates []v1alpha1.WorkspaceSourceStatus) []v1alpha1.WorkspaceSourceStatus {
	out := append([]v1alpha1.WorkspaceSourceStatus(nil), sts...)
	for _, u := range updates {
		for i := range out {
			if out[i].Target == u.Target {
				out[i] = u
			}
		}
	}
	return out
}

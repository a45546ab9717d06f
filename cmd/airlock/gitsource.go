package main

import (
	"path"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/policies"
)

// gitSourceOptions are run's flags that fill a Session's workspaces from
// git repositories (--context only: the node agent fetches them).
type gitSourceOptions struct {
	sources []string // TARGET=URL[#REF]
	pushes  []string // TARGET=BRANCH
	depth   int32
	claims  []string // TARGET=CLAIM[:SUBPATH]
}

func (o *gitSourceOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&o.sources, "git-source", nil, "with --context: fill the workspace at TARGET from a git repository: `TARGET=URL[#REF]` (http or https, no credentials, or ssh://USER@HOST[:PORT]/PATH: the node's admission policy admits the URL and holds its token or key; REF a branch, tag or commit, default the repository's HEAD; repeatable)")
	cmd.Flags().StringArrayVar(&o.pushes, "git-push", nil, "with --context: once the session has ended and no change waits for review, push the workspace at TARGET (a --git-source) to branch `TARGET=BRANCH` of its repository (the node's admission policy admits the branch)")
	cmd.Flags().Int32Var(&o.depth, "git-depth", 1, "with --context: how many commits of each --git-source's history to fetch (0: all)")
	cmd.Flags().StringArrayVar(&o.claims, "volume-claim", nil, "with --context: take the workspace at TARGET from the PersistentVolume bound to a claim of the Session's namespace: `TARGET=CLAIM[:SUBPATH]` (a local or hostPath volume under the node's volume_paths; SUBPATH a directory inside the volume's, relative, no \"..\", through no symlink, as the workspace instead of the whole volume; repeatable)")
}

// set reports whether any of the flags was given.
func (o *gitSourceOptions) set(cmd *cobra.Command) bool {
	return cmd.Flags().Changed("git-source") || cmd.Flags().Changed("git-push") || cmd.Flags().Changed("git-depth") || cmd.Flags().Changed("volume-claim")
}

// workspaceSources turns the flags into a Session's workspace sources.
// The API server checks them again (the CRD's schema), and the node
// agent against its admission policy.
func (o *gitSourceOptions) workspaceSources() ([]v1alpha1.WorkspaceSource, error) {
	if o.depth < 0 {
		return nil, usageErrorf("--git-depth %d: want 0 (all) or more", o.depth)
	}
	var out []v1alpha1.WorkspaceSource
	at := map[string]int{}
	for _, s := range o.sources {
		target, rawURL, ok := strings.Cut(s, "=")
		if !ok || target == "" || rawURL == "" {
			return nil, usageErrorf("invalid --git-source %q: want TARGET=URL[#REF]", s)
		}
		if !path.IsAbs(target) || path.Clean(target) != target {
			return nil, usageErrorf("invalid --git-source %q: the target %q is not a clean absolute path", s, target)
		}
		if _, dup := at[target]; dup {
			return nil, usageErrorf("invalid --git-source %q: %s has a source already", s, target)
		}
		rawURL, ref, _ := strings.Cut(rawURL, "#")
		if r := policies.CheckGitURL(rawURL); r != "" {
			return nil, usageErrorf("invalid --git-source %q: %s (want an http or https URL without credentials or query, or ssh://USER@HOST[:PORT]/PATH)", s, r)
		}
		at[target] = len(out)
		out = append(out, v1alpha1.WorkspaceSource{Target: target, Git: &v1alpha1.GitSource{URL: rawURL, Ref: ref, Depth: o.depth}})
	}
	for _, c := range o.claims {
		target, claim, ok := strings.Cut(c, "=")
		// A claim's name has no ':' (a DNS subdomain): what follows the
		// first is the subPath.
		claim, sub, hasSub := strings.Cut(claim, ":")
		if !ok || target == "" || claim == "" {
			return nil, usageErrorf("invalid --volume-claim %q: want TARGET=CLAIM[:SUBPATH]", c)
		}
		if hasSub {
			if r := v1alpha1.CheckSubPath(sub); r != "" {
				return nil, usageErrorf("invalid --volume-claim %q: subPath %q: %s", c, sub, r)
			}
		}
		if !path.IsAbs(target) || path.Clean(target) != target {
			return nil, usageErrorf("invalid --volume-claim %q: the target %q is not a clean absolute path", c, target)
		}
		if _, dup := at[target]; dup {
			return nil, usageErrorf("invalid --volume-claim %q: %s has a source already", c, target)
		}
		at[target] = len(out)
		out = append(out, v1alpha1.WorkspaceSource{Target: target, Volume: &v1alpha1.VolumeSource{ClaimName: claim, SubPath: sub}})
	}
	for _, p := range o.pushes {
		target, branch, ok := strings.Cut(p, "=")
		if !ok || target == "" || branch == "" {
			return nil, usageErrorf("invalid --git-push %q: want TARGET=BRANCH", p)
		}
		i, ok := at[target]
		if !ok {
			return nil, usageErrorf("invalid --git-push %q: no --git-source fills %s", p, target)
		}
		if out[i].Git == nil {
			return nil, usageErrorf("invalid --git-push %q: %s is a --volume-claim: only a git source is pushed", p, target)
		}
		if out[i].Git.PushBranch != "" {
			return nil, usageErrorf("invalid --git-push %q: %s is pushed to %s already", p, target, out[i].Git.PushBranch)
		}
		out[i].Git.PushBranch = branch
	}
	return out, nil
}

// errGitSourceLocal is the refusal of the git flags without --context.
var errGitSourceLocal = usageErrorf("--git-source, --git-push, --git-depth and --volume-claim work with --context only: the node agent fetches the repository or finds the volume; a local session's workspace is a directory of this host (workspace { host_path = ... })")

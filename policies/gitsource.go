package policies

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// GitSource is an admission `git_source "URL-GLOB" { push_branches = [...] }`
// block: the node agent may fetch a workspace from a repository whose URL
// URL matches, and push a session's committed changes back to it on the
// branches PushBranches match alone.
//
// The agent fetches and pushes from the node itself, with the node's
// network and identity, so a source admitted here is one every caller that
// may create Sessions can have the node reach: name the repositories, not
// a host's every path.
type GitSource struct {
	// URL is a glob (path.Match syntax over the whole URL: "*" does not
	// cross '/') of http or https repository URLs, such as
	// "https://git.corp.test/agents/*".
	URL string `json:"url"`
	// PushBranches are globs of the branch names a session's changes may
	// be pushed to ("airlock/*"); none: no push.
	PushBranches []string `json:"push_branches,omitempty"`
	// TokenFile, when set, is a file on the node holding a token the
	// agent sends to these repositories (HTTP basic authentication as
	// Username), for private repositories and pushes. The daemon reads it
	// as root at each fetch and push; like a secret source's file it is
	// refused as a workspace or mount, and must be a regular file with one
	// name.
	TokenFile string `json:"token_file,omitempty"`
	// Username goes with TokenFile's token; DefaultGitUsername unless set.
	Username string `json:"username,omitempty"`
	// Namespaces, when set, are the Kubernetes namespaces whose Sessions
	// the block admits, and the only ones its token is sent for; none:
	// every namespace's. Blocks for one URL glob and different
	// namespaces give each namespace its own token and push branches.
	Namespaces []string `json:"namespaces,omitempty"`
}

// admitsNamespace reports whether g admits the Sessions of namespace ns.
func (g GitSource) admitsNamespace(ns string) bool {
	return len(g.Namespaces) == 0 || slices.Contains(g.Namespaces, ns)
}

// DefaultGitUsername is a git source's username when its block names a
// token file and no username: the one GitHub's and Gitea's installation
// tokens take (GitLab takes any name with a token).
const DefaultGitUsername = "x-access-token"

// MaxGitToken bounds a git source's token file.
const MaxGitToken = 4 << 10

// Token reads g's token file: "" when g has none, an error when the file
// is not a regular file with one name, is larger than MaxGitToken, or
// holds a character that cannot go in an HTTP header. Surrounding white
// space is trimmed.
func (g GitSource) Token() (string, error) {
	if g.TokenFile == "" {
		return "", nil
	}
	resolved, err := filepath.EvalSymlinks(g.TokenFile)
	if err != nil {
		return "", fmt.Errorf("git source %s: token file: %w", g.URL, err)
	}
	if r := secretFileReason(resolved); r != "" {
		return "", fmt.Errorf("git source %s: token file: %s", g.URL, r)
	}
	f, err := os.OpenFile(resolved, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", fmt.Errorf("git source %s: token file: %w", g.URL, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxGitToken+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("git source %s: token file: %w", g.URL, err)
	case len(b) > MaxGitToken:
		return "", fmt.Errorf("git source %s: token file %s is larger than %d bytes", g.URL, g.TokenFile, MaxGitToken)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsFunc(tok, func(c rune) bool { return c < ' ' || c == 0x7f }) {
		return "", fmt.Errorf("git source %s: token file %s is empty or holds control characters", g.URL, g.TokenFile)
	}
	return tok, nil
}

func (g GitSource) String() string {
	s := g.URL
	if len(g.Namespaces) > 0 {
		s += " for namespaces " + strings.Join(g.Namespaces, ", ")
	}
	if len(g.PushBranches) == 0 {
		return s + " (no push)"
	}
	return fmt.Sprintf("%s (push to %s)", s, strings.Join(g.PushBranches, ", "))
}

// CheckGitURL says what is wrong with a repository URL a workspace is
// fetched from, or "". Only http and https are taken (git's other
// transports run programs or reach the node's files), with a host, and
// with no user information (a credential written in a Session would be
// stored in the API server and shown in its status), query or fragment.
func CheckGitURL(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Sprintf("%q is not a URL: %v", raw, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("%q is not an http or https URL", raw)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Sprintf("%q has no host", raw)
	case u.User != nil:
		return fmt.Sprintf("%q carries user information: credentials are the node's, never written in a Session", raw)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fmt.Sprintf("%q has a query or fragment", raw)
	case u.Opaque != "" || strings.ContainsAny(raw, " \t\r\n\\%"):
		// No escapes: what an admission glob matched is what git asks for.
		return fmt.Sprintf("%q is not a plain repository URL (no spaces, backslashes or %%-escapes)", raw)
	case u.Path != "" && path.Clean(u.Path) != u.Path:
		// "/agents/../admin.git" would match "/agents/*" and reach another
		// repository.
		return fmt.Sprintf("%q has a path that is not clean (no \".\" or \"..\" segments, no trailing or doubled '/')", raw)
	case u.String() != raw:
		return fmt.Sprintf("%q is not in canonical form (write %q)", raw, u.String())
	case strings.ToLower(u.Scheme+"://"+u.Host) != u.Scheme+"://"+u.Host:
		return fmt.Sprintf("%q has upper-case letters in its scheme or host (write them in lower case)", raw)
	}
	return ""
}

// CheckBranch says what is wrong with a branch name a session's changes
// are pushed to, or "": a name git takes as refs/heads/NAME, without the
// forms git or a glob would read otherwise.
func CheckBranch(b string) string {
	switch {
	case b == "":
		return "the branch name is empty"
	case strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") || strings.HasSuffix(b, "."):
		return fmt.Sprintf("%q is not a branch name", b)
	case strings.HasPrefix(b, "refs/"):
		return fmt.Sprintf("%q names a ref: write the branch name alone", b)
	case strings.Contains(b, "..") || strings.Contains(b, "//") || strings.Contains(b, "@{") || strings.Contains(b, "/.") || strings.HasSuffix(b, ".lock"):
		return fmt.Sprintf("%q is not a branch name", b)
	case strings.ContainsFunc(b, func(c rune) bool {
		return c <= ' ' || c == 0x7f || strings.ContainsRune("~^:?*[\\", c)
	}):
		return fmt.Sprintf("%q holds a character a branch name may not", b)
	case len(b) > 200:
		return fmt.Sprintf("branch name of %d bytes: at most 200", len(b))
	}
	return ""
}

// AdmitGitSource checks that a Session of the Kubernetes namespace
// namespace may have its workspace fetched from the repository rawURL
// and, when pushBranch is not empty, its changes pushed to that branch of
// it. It returns the first git_source block that admits it (its token is
// the one sent), or an *AdmissionError naming the rule.
func (a *Admission) AdmitGitSource(namespace, rawURL, pushBranch string) (*GitSource, error) {
	if r := CheckGitURL(rawURL); r != "" {
		return nil, &AdmissionError{Problems: []string{"git source refused: " + r}}
	}
	fetch := false
	for i, g := range a.GitSources {
		if ok, err := path.Match(g.URL, rawURL); err != nil || !ok || !g.admitsNamespace(namespace) {
			continue
		}
		fetch = true
		if pushBranch == "" {
			return &a.GitSources[i], nil
		}
		for _, b := range g.PushBranches {
			if ok, err := path.Match(b, pushBranch); err == nil && ok {
				return &a.GitSources[i], nil
			}
		}
	}
	if !fetch {
		return nil, &AdmissionError{Problems: []string{fmt.Sprintf("git source %q refused for namespace %q: it matches none of the git sources admitted there (%s)", rawURL, namespace, a.gitSourcesString(namespace))}}
	}
	return nil, &AdmissionError{Problems: []string{fmt.Sprintf("push to branch %q of %q refused: the admitted git sources that match it admit pushes to other branches only (%s)", pushBranch, rawURL, a.gitSourcesString(namespace))}}
}

// gitSourcesString lists the git sources admitted for namespace ns: a
// refusal, shown in a Session's status, names no other namespace's.
func (a *Admission) gitSourcesString(ns string) string {
	var out []string
	for _, g := range a.GitSources {
		if g.admitsNamespace(ns) {
			out = append(out, g.String())
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

// checkGitSourceGlob checks a git_source block's label.
func checkGitSourceGlob(g string) string {
	if _, err := path.Match(g, ""); err != nil {
		return fmt.Sprintf("%q is not a valid glob", g)
	}
	scheme, rest, ok := strings.Cut(g, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return fmt.Sprintf("%q does not start with http:// or https://", g)
	}
	host, _, _ := strings.Cut(rest, "/")
	switch {
	case host == "":
		return fmt.Sprintf("%q has no host", g)
	case strings.ContainsAny(host, "*?[\\"):
		// A glob in the host would admit hosts the operator never named
		// ("https://*/x" reaches any address the node can).
		return fmt.Sprintf("%q has a glob in its host: name the host", g)
	case strings.ContainsAny(host, "@"):
		return fmt.Sprintf("%q carries user information", g)
	case strings.ToLower(host) != host:
		return fmt.Sprintf("%q has upper-case letters in its host (write it in lower case)", g)
	}
	return ""
}

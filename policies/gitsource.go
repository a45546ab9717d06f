package policies

import (
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// GitSource is an admission `git_source "URL-GLOB" { push_branches = [...] }`
// block: the node agent may fetch a workspace from a repository whose URL
// URL matches, and push a session's committed changes back to it on the
// branches PushBranches match alone. An http or https source may name a
// token (TokenFile); an ssh source names the node's key (SSHKeyFile) and
// the host keys it trusts (KnownHosts).
//
// The agent fetches and pushes from the node itself, with the node's
// network and identity, so a source admitted here is one every caller that
// may create Sessions can have the node reach: name the repositories, not
// a host's every path.
type GitSource struct {
	// URL is a glob (path.Match syntax over the whole URL: "*" does not
	// cross '/') of http, https or ssh repository URLs, such as
	// "https://git.corp.test/agents/*" or "ssh://git@git.corp.test/agents/*"
	// (its host, port and user named, no glob in them).
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
	// SSHKeyFile is, for ssh sources (required), the node's private key
	// the agent's ssh authenticates with, and the only one it offers (no
	// agent, no other identity). Like TokenFile it is refused as a
	// workspace or mount, and must be a regular file with one name.
	SSHKeyFile string `json:"ssh_key_file,omitempty"`
	// KnownHosts is, for ssh sources (required), a known_hosts file of the
	// host keys the agent's ssh trusts: a host whose key it does not list
	// is refused, never trusted on first use ("[host]:port KEY" for a port
	// other than 22). Refused as a workspace or mount.
	KnownHosts string `json:"known_hosts,omitempty"`
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

// MaxSSHFile bounds a git source's key and known hosts files.
const MaxSSHFile = 1 << 20

// sshPath is what the path of an ssh source's key or known hosts file may
// be: it is written in ssh's command line, which a shell reads and where
// ssh expands '%' and '~'.
var sshPath = regexp.MustCompile(`^/[A-Za-z0-9._+/-]*$`)

// checkSSHPath says what is wrong with the path of an ssh source's key or
// known hosts file, or "".
func checkSSHPath(p string) string {
	switch {
	case !filepath.IsAbs(p):
		return fmt.Sprintf("%q is not an absolute path", p)
	case filepath.Clean(p) != p:
		return fmt.Sprintf("%q is not a clean path (write %q)", p, filepath.Clean(p))
	case !sshPath.MatchString(p):
		return fmt.Sprintf("%q holds a character other than letters, digits and \"._+-/\" (ssh's command line takes it)", p)
	}
	return ""
}

// SSHFiles resolves g's key and known hosts files, for an ssh source:
// their paths with no symlink, each checked to be a regular file with one
// name, of at most MaxSSHFile bytes, at a path ssh's command line takes.
// An error when g names neither (not an ssh source) or either is missing.
func (g GitSource) SSHFiles() (key, knownHosts string, err error) {
	if g.SSHKeyFile == "" || g.KnownHosts == "" {
		return "", "", fmt.Errorf("git source %s: an ssh source needs ssh_key_file and known_hosts", g.URL)
	}
	resolve := func(what, p string) (string, error) {
		resolved, err := filepath.EvalSymlinks(p)
		if err != nil {
			return "", fmt.Errorf("git source %s: %s: %w", g.URL, what, err)
		}
		if r := secretFileReason(resolved); r != "" {
			return "", fmt.Errorf("git source %s: %s: %s", g.URL, what, r)
		}
		if r := checkSSHPath(resolved); r != "" {
			return "", fmt.Errorf("git source %s: %s: %s", g.URL, what, r)
		}
		fi, err := os.Lstat(resolved)
		switch {
		case err != nil:
			return "", fmt.Errorf("git source %s: %s: %w", g.URL, what, err)
		case fi.Size() > MaxSSHFile:
			return "", fmt.Errorf("git source %s: %s %s is larger than %d bytes", g.URL, what, p, MaxSSHFile)
		case fi.Size() == 0:
			return "", fmt.Errorf("git source %s: %s %s is empty", g.URL, what, p)
		}
		return resolved, nil
	}
	if key, err = resolve("ssh_key_file", g.SSHKeyFile); err != nil {
		return "", "", err
	}
	if knownHosts, err = resolve("known_hosts", g.KnownHosts); err != nil {
		return "", "", err
	}
	return key, knownHosts, nil
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

// scpLike is git's scp-like ssh form, [USER@]HOST:PATH.
var scpLike = regexp.MustCompile(`^([^@/:]+@)?[^@/:]+:([^:]|$)`)

// sshUser is what the user name of an ssh URL may be.
var sshUser = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$`)

// CheckGitURL says what is wrong with a repository URL a workspace is
// fetched from, or "". Only http, https and ssh are taken (git's other
// transports run programs or reach the node's files), with a host, with
// no query or fragment, in canonical form. An http or https URL has no
// user information (a credential written in a Session would be stored in
// the API server and shown in its status); an ssh URL names its user
// alone (ssh://git@git.corp.test/repo.git, no password: the key is the
// node's) and no '[' or ']' in its path (git reads "@[HOST]" there as the
// host), and git's scp-like form (git@host:repo.git) is not taken.
func CheckGitURL(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case !strings.Contains(raw, "://") && scpLike.MatchString(raw):
		return fmt.Sprintf("%q is git's scp-like form, not an http, https or ssh URL: write ssh://USER@HOST/PATH", raw)
	case err != nil:
		return fmt.Sprintf("%q is not a URL: %v", raw, err)
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "ssh":
		return fmt.Sprintf("%q is not an http, https or ssh URL (write ssh URLs as ssh://USER@HOST/PATH)", raw)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Sprintf("%q has no host", raw)
	case u.Scheme != "ssh" && u.User != nil:
		return fmt.Sprintf("%q carries user information: credentials are the node's, never written in a Session", raw)
	case u.Scheme == "ssh" && u.User == nil:
		return fmt.Sprintf("%q names no user: write ssh://USER@HOST/PATH", raw)
	case u.Scheme == "ssh" && u.User.String() != u.User.Username():
		return fmt.Sprintf("%q carries a password: credentials are the node's, never written in a Session", raw)
	case u.Scheme == "ssh" && !sshUser.MatchString(u.User.Username()):
		return fmt.Sprintf("%q has a user name other than letters, digits and \"._-\"", raw)
	case u.Scheme == "ssh" && (strings.HasPrefix(u.Hostname(), "-") || u.Path == "" || u.Path == "/"):
		return fmt.Sprintf("%q names no repository on its host", raw)
	case u.Scheme == "ssh" && strings.ContainsAny(u.Path, "[]"):
		// git reads "@[" anywhere in an ssh URL as the start of a
		// bracketed host, its path included: ssh://git@h/x@[other]:2222/r
		// reaches other:2222.
		return fmt.Sprintf("%q has '[' or ']' in its path (git would read a host there)", raw)
	case u.Port() != "" && !validPort(u.Port()):
		return fmt.Sprintf("%q has an invalid port", raw)
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

// validPort reports whether p is a port number as a canonical URL writes
// it.
func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n <= 65535 && strconv.Itoa(n) == p
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
		if !matchGitGlob(g.URL, rawURL) || !g.admitsNamespace(namespace) {
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
			g.Namespaces = nil // nor the other namespaces that share a block
			out = append(out, g.String())
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

// sshHost is an ssh glob's host and port: a name or an IPv4 address, or
// an IPv6 address in brackets (checked by bracketedIPv6).
var sshHost = regexp.MustCompile(`^([^:@\[\]]+|\[[0-9A-Fa-f:.]+\])(:[1-9][0-9]{0,4})?$`)

// bracketedIPv6 reports whether host (HOST or HOST:PORT) is an IPv6
// address in brackets, as URLs write one, with no zone.
func bracketedIPv6(host string) bool {
	if !strings.HasPrefix(host, "[") {
		return false
	}
	end := strings.IndexByte(host, ']')
	if end < 0 || (end+1 < len(host) && host[end+1] != ':') {
		return false
	}
	a, err := netip.ParseAddr(host[1:end])
	return err == nil && a.Is6() && a.Zone() == ""
}

// matchGitGlob matches a git_source block's glob against a URL: the
// scheme and authority (user, host, port) as written, which the glob
// cannot hold a pattern in (checkGitSourceGlob), and the rest with
// path.Match. The host so compared may be an IPv6 address in brackets,
// which path.Match would read as a character class.
func matchGitGlob(glob, rawURL string) bool {
	gHead, gPath := splitAuthority(glob)
	uHead, uPath := splitAuthority(rawURL)
	if gHead == "" || gHead != uHead {
		return false
	}
	ok, err := path.Match(gPath, uPath)
	return err == nil && ok
}

// splitAuthority cuts a URL (or glob) after its scheme and authority:
// "ssh://git@h:22" and "/org/*.git". "" when there is no "://".
func splitAuthority(u string) (head, rest string) {
	scheme, after, ok := strings.Cut(u, "://")
	if !ok {
		return "", u
	}
	if i := strings.IndexByte(after, '/'); i >= 0 {
		return scheme + "://" + after[:i], after[i:]
	}
	return u, ""
}

// checkGitSourceGlob checks a git_source block's label.
func checkGitSourceGlob(g string) string {
	if _, err := path.Match(g, ""); err != nil {
		return fmt.Sprintf("%q is not a valid glob", g)
	}
	scheme, rest, ok := strings.Cut(g, "://")
	if !ok || (scheme != "http" && scheme != "https" && scheme != "ssh") {
		return fmt.Sprintf("%q does not start with http://, https:// or ssh://", g)
	}
	host, _, _ := strings.Cut(rest, "/")
	user, userHost, hasUser := strings.Cut(host, "@")
	hostPort := host
	if hasUser {
		hostPort = userHost
	}
	switch {
	case host == "":
		return fmt.Sprintf("%q has no host", g)
	case strings.ContainsAny(host, "*?\\"):
		// A glob in the host would admit hosts the operator never named
		// ("https://*/x" reaches any address the node can).
		return fmt.Sprintf("%q has a glob in its host: name the host", g)
	case strings.ContainsAny(host, "[]") && !bracketedIPv6(hostPort):
		return fmt.Sprintf("%q has '[' or ']' in its host other than around an IPv6 address (a glob in the host is refused; write an IPv6 address [ADDRESS] or [ADDRESS]:PORT)", g)
	case scheme != "ssh" && hasUser:
		return fmt.Sprintf("%q carries user information", g)
	case scheme == "ssh" && (!hasUser || !sshUser.MatchString(user)):
		return fmt.Sprintf("%q names no user, or one with characters other than letters, digits and \"._-\": write ssh://USER@HOST/PATH", g)
	case scheme == "ssh" && !sshHost.MatchString(userHost):
		return fmt.Sprintf("%q has no host, or one with a password or a bad port", g)
	case strings.ToLower(host) != host && scheme != "ssh", strings.ToLower(userHost) != userHost:
		return fmt.Sprintf("%q has upper-case letters in its host (write it in lower case)", g)
	}
	return ""
}

package fsscope

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
)

// gitVar is one variable of a git config file.
type gitVar struct {
	Section    string // lower-case
	Subsection string // as written (case-sensitive), "" when absent
	Key        string // lower-case
	Value      string
	HasValue   bool // "key = value" rather than a bare "key" (boolean true)
}

// Name returns section[.subsection].key as git config --list prints it.
func (v gitVar) Name() string {
	if v.Subsection != "" {
		return v.Section + "." + v.Subsection + "." + v.Key
	}
	return v.Section + "." + v.Key
}

// gitItem is one logical line of a config file: a section header, a
// variable (possibly continued over several physical lines), or anything
// else (blank, comment, unparseable), kept verbatim.
type gitItem struct {
	raw        string // the physical lines, newlines included
	header     bool
	section    string
	subsection string
	legacy     bool // [section.subsection]
	hasVar     bool
	v          gitVar
}

// parseGitConfig splits a config file into items. It is lenient: what it
// cannot parse is kept as an opaque item, as git would refuse such a file
// anyway.
func parseGitConfig(data []byte) []gitItem {
	lines := strings.SplitAfter(string(data), "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	var items []gitItem
	section, subsection := "", ""
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		s := strings.TrimLeft(line, " \t")
		if strings.HasPrefix(s, "[") {
			it, rest, ok := parseHeader(s)
			if !ok {
				items = append(items, gitItem{raw: line})
				continue
			}
			it.raw = line
			section, subsection = it.section, it.subsection
			rest = strings.TrimLeft(rest, " \t")
			if rest != "" && rest != "\n" && rest != "\r\n" && rest[0] != '#' && rest[0] != ';' {
				// A variable may follow the header on the same line.
				v, n, ok := parseVar(append([]string{rest}, lines[i+1:]...))
				if ok {
					for j := 1; j < n; j++ {
						it.raw += lines[i+j]
					}
					i += n - 1
					v.Section, v.Subsection = section, subsection
					it.hasVar, it.v = true, v
				}
			}
			items = append(items, it)
			continue
		}
		if s == "" || s[0] == '\n' || s[0] == '\r' || s[0] == '#' || s[0] == ';' {
			items = append(items, gitItem{raw: line})
			continue
		}
		v, n, ok := parseVar(lines[i:])
		if !ok {
			items = append(items, gitItem{raw: line})
			continue
		}
		raw := strings.Join(lines[i:i+n], "")
		i += n - 1
		v.Section, v.Subsection = section, subsection
		items = append(items, gitItem{raw: raw, hasVar: true, v: v})
	}
	return items
}

// parseHeader parses "[section]", "[section \"sub\"]" or "[section.sub]"
// at the start of s and returns the rest of the line.
func parseHeader(s string) (gitItem, string, bool) {
	it := gitItem{header: true}
	i := 1
	start := i
	for i < len(s) && (isAlnum(s[i]) || s[i] == '-' || s[i] == '.') {
		i++
	}
	name := s[start:i]
	if name == "" || i >= len(s) {
		return it, "", false
	}
	switch s[i] {
	case ']':
		if sec, sub, ok := strings.Cut(name, "."); ok {
			it.section, it.subsection, it.legacy = strings.ToLower(sec), strings.ToLower(sub), true
		} else {
			it.section = strings.ToLower(name)
		}
		return it, s[i+1:], true
	case ' ', '\t':
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i >= len(s) || s[i] != '"' {
			return it, "", false
		}
		i++
		var sub strings.Builder
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\n' {
				return it, "", false
			}
			if s[i] == '\\' && i+1 < len(s) {
				i++
			}
			sub.WriteByte(s[i])
		}
		if i+1 >= len(s) || s[i+1] != ']' {
			return it, "", false
		}
		it.section, it.subsection = strings.ToLower(name), sub.String()
		return it, s[i+2:], true
	}
	return it, "", false
}

// parseVar parses a variable starting on lines[0]; it returns the number
// of physical lines it spans.
func parseVar(lines []string) (gitVar, int, bool) {
	var v gitVar
	s := strings.TrimLeft(lines[0], " \t")
	i := 0
	for i < len(s) && (isAlnum(s[i]) || s[i] == '-') {
		i++
	}
	if i == 0 || !isAlpha(s[0]) {
		return v, 0, false
	}
	v.Key = strings.ToLower(s[:i])
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	if i >= len(s) || s[i] == '\n' || s[i] == '\r' || s[i] == '#' || s[i] == ';' {
		return v, 1, true
	}
	if s[i] != '=' {
		return v, 0, false
	}
	v.HasValue = true
	i++
	var val strings.Builder
	quoted := false
	n := 1
	pendingSpace := ""
	for {
		if i >= len(s) {
			break
		}
		c := s[i]
		switch {
		case c == '\n' || (c == '\r' && i+1 < len(s) && s[i+1] == '\n'):
			if quoted {
				return v, 0, false
			}
			v.Value = val.String()
			return v, n, true
		case c == '\\':
			if i+1 >= len(s) {
				return v, 0, false
			}
			switch s[i+1] {
			case '\n':
				// Continuation on the next physical line.
				if n >= len(lines) {
					return v, 0, false
				}
				s = lines[n]
				n++
				i = 0
				continue
			case 'n':
				c = '\n'
			case 't':
				c = '\t'
			case 'b':
				c = '\b'
			case '"', '\\':
				c = s[i+1]
			default:
				return v, 0, false
			}
			val.WriteString(pendingSpace)
			pendingSpace = ""
			val.WriteByte(c)
			i += 2
			continue
		case c == '"':
			quoted = !quoted
		case !quoted && (c == '#' || c == ';'):
			v.Value = val.String()
			return v, n, true
		case !quoted && (c == ' ' || c == '\t'):
			if val.Len() > 0 {
				pendingSpace += string(c)
			}
		default:
			val.WriteString(pendingSpace)
			pendingSpace = ""
			val.WriteByte(c)
		}
		i++
	}
	if quoted {
		return v, 0, false
	}
	v.Value = val.String()
	return v, n, true
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isAlnum(c byte) bool { return isAlpha(c) || c >= '0' && c <= '9' }

// urlUserinfo finds the userinfo of a URL: scheme://userinfo@.
var urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)([^/@\s"]*)@`)

// stripUserinfo removes credentials from every URL in s: the whole
// userinfo of http(s)/ftp URLs (tokens travel as user names there), and the
// password of any other URL (an ssh user name is kept).
func stripUserinfo(s string) string {
	// Removing one userinfo can join its scheme with a following "...@".
	for {
		clean := stripUserinfoOnce(s)
		if clean == s {
			return s
		}
		s = clean
	}
}

func stripUserinfoOnce(s string) string {
	return urlUserinfo.ReplaceAllStringFunc(s, func(m string) string {
		sub := urlUserinfo.FindStringSubmatch(m)
		scheme := strings.ToLower(strings.TrimSuffix(sub[1], "://"))
		switch scheme {
		case "http", "https", "ftp", "ftps":
			return sub[1]
		}
		if user, _, ok := strings.Cut(sub[2], ":"); ok {
			return sub[1] + user + "@"
		}
		return m
	})
}

// httpSecretKeys are http.* (and http.<url>.*) keys that carry secrets.
var httpSecretKeys = []string{"extraheader", "cookiefile", "proxyauthmethod", "sslkey", "sslcertpasswordprotected", "sslkeypasswordprotected"}

// secretKey matches variable names that hold secrets outside URLs, such as
// github.token or sendemail.smtpPass.
var secretKey = regexp.MustCompile(`(?i)(token|passw|pass$|secret|apikey|api-key)`)

// SanitizeGitConfig returns data with credentials removed: credential
// sections (helpers, usernames), http extra headers and cookie files,
// variables named like secrets (*token*, *password*, *secret*), and the
// userinfo of URLs anywhere in the file. Everything else is
// kept as written, so git keeps working. changed reports whether anything
// was removed.
func SanitizeGitConfig(data []byte) (out []byte, changed bool) {
	var b bytes.Buffer
	dropSection := false
	for _, it := range parseGitConfig(data) {
		raw := it.raw
		if it.header {
			dropSection = it.section == "credential"
			if dropSection {
				changed = true
				continue
			}
			if clean := stripUserinfo(it.subsection); clean != it.subsection {
				changed = true
				raw = formatHeader(it.section, clean, it.legacy)
				if it.hasVar {
					raw += "\t" + formatVar(it.v)
				}
				b.WriteString(raw)
				continue
			}
		} else if dropSection {
			if strings.TrimSpace(raw) != "" {
				changed = true
			}
			continue
		}
		if it.hasVar {
			v := it.v
			if v.Section == "http" && slices.Contains(httpSecretKeys, v.Key) || secretKey.MatchString(v.Key) {
				changed = true
				if it.header {
					b.WriteString(formatHeader(it.section, stripUserinfo(it.subsection), it.legacy))
				}
				continue
			}
			if clean := stripUserinfo(v.Value); clean != v.Value {
				changed = true
				v.Value = clean
				line := "\t" + formatVar(v)
				if it.header {
					line = formatHeader(it.section, stripUserinfo(it.subsection), it.legacy) + line
				}
				b.WriteString(line)
				continue
			}
		}
		// Comments and lines git cannot parse are still readable.
		if clean := stripUserinfo(raw); clean != raw {
			changed = true
			raw = clean
		}
		b.WriteString(raw)
	}
	if !changed {
		return data, false
	}
	return b.Bytes(), true
}

func formatHeader(section, subsection string, legacy bool) string {
	switch {
	case subsection == "":
		return "[" + section + "]\n"
	case legacy:
		return "[" + section + "." + subsection + "]\n"
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return "[" + section + " \"" + r.Replace(subsection) + "\"]\n"
}

func formatVar(v gitVar) string {
	if !v.HasValue {
		return v.Key + "\n"
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`, "\b", `\b`)
	return v.Key + " = \"" + r.Replace(v.Value) + "\"\n"
}

// gitExecKeys are config variables whose value git runs as a command, or
// which make git load a file, a hook or a program, or fetch from a path
// that the sandbox could name: a change to one of them in a committed
// config would run the agent's command on the host the next time someone
// uses git there. Patterns are section[.*].key; "*" stands for any
// subsection, a key "*" for every key of the section. This list, with
// gitExecSuffixes and gitExecValue, is the one place that says which
// config changes a commit refuses; TestGitExecKeys names every entry.
var gitExecKeys = []string{
	// Files read as config, templates and attributes.
	"include.path", "includeif.*.path", "core.excludesfile", "core.attributesfile",
	"init.templatedir", "commit.template",
	// Hooks, and where git looks for them.
	"core.hookspath", "hook.*.command", "hook.*.event", "uploadpack.packobjectshook",
	"core.fsmonitor", "core.worktree",
	// Commands git runs.
	"core.pager", "core.editor", "core.sshcommand", "core.askpass", "core.gitproxy",
	"core.alternaterefscommand", "sequence.editor", "diff.external", "diff.*.textconv",
	"diff.*.command", "interactive.difffilter", "merge.*.driver", "filter.*.clean",
	"filter.*.smudge", "filter.*.process", "lfs.*.clean", "lfs.*.smudge", "credential.*", "gpg.program", "gpg.*.program",
	"gpg.ssh.defaultkeycommand", "gpg.ssh.allowedsignersfile", "gpg.ssh.revocationfile",
	"tar.*.command", "pager.*", "web.browser", "browser.*.cmd", "browser.*.path",
	"man.viewer", "man.*.cmd", "man.*.path", "difftool.*.cmd", "difftool.*.path",
	"mergetool.*.cmd", "mergetool.*.path", "guitool.*.cmd", "submodule.*.update",
	"sendemail.*", "instaweb.*", "imap.tunnel", "alias.*", "trailer.*.command",
	"trailer.*.cmd", "ssh.variant",
	// Where fetch and push go, and with what.
	"remote.*.uploadpack", "remote.*.receivepack", "remote.*.vcs", "remote.*.proxy",
	"http.proxy", "http.*.proxy", "url.*.insteadof", "url.*.pushinsteadof",
	"protocol.allow", "protocol.*.allow", "safe.*",
	// The permissions of what git creates: world-writable refs and
	// setgid, world-writable object directories.
	"core.sharedrepository",
}

// gitExecSuffixes catch variables named like a command or a program that
// gitExecKeys does not list (future git versions, tools reading git's
// config such as git-lfs's lfs.customtransfer.*.path or
// lfs.extension.*.clean).
var gitExecSuffixes = []string{"command", "cmd", "program", "hook", "editor", "pager", "helper", "driver", "textconv", "proxy", "insteadof", "clean", "smudge"}

// isGitExecKey reports whether v is one of gitExecKeys, ends in one of
// gitExecSuffixes, or has a value that makes git run a command. Every
// alias counts, not only "!cmd" ones: "-c core.fsmonitor=cmd status" or
// "submodule foreach cmd" run commands too, and a repository's alias
// overrides the operator's global one of the same name.
func isGitExecKey(v gitVar) bool {
	if gitExecValue(v) {
		return true
	}
	for _, suf := range gitExecSuffixes {
		if strings.HasSuffix(v.Key, suf) {
			return true
		}
	}
	if v.Key == "path" && v.Subsection != "" {
		// lfs.customtransfer.<name>.path, difftool.<tool>.path: programs.
		return true
	}
	for _, p := range gitExecKeys {
		sec, rest, _ := strings.Cut(p, ".")
		if sec != v.Section {
			continue
		}
		sub, key, hasSub := strings.Cut(rest, ".")
		if !hasSub {
			key, sub = rest, ""
		}
		switch {
		case !hasSub && key == "*":
			return true
		case hasSub && sub == "*" && v.Subsection != "" && (key == v.Key || key == "*"):
			return true
		case !hasSub && v.Subsection == "" && key == v.Key:
			return true
		case hasSub && sub != "*" && strings.EqualFold(sub, v.Subsection) && key == v.Key:
			return true
		}
	}
	return false
}

// gitExecValue reports whether v's value runs a command whatever its key
// (a remote URL through the ext:: or fd:: transports), or makes the
// operator's next git fetch move or delete local refs other than
// remote-tracking ones: a fetch refspec writing outside refs/remotes/
// (into a branch or a tag, which protect_refs may guard), or pruning
// tags.
func gitExecValue(v gitVar) bool {
	val := strings.ToLower(strings.TrimSpace(v.Value))
	switch {
	case v.Section == "remote" && (v.Key == "url" || v.Key == "pushurl"):
		return strings.HasPrefix(val, "ext::") || strings.HasPrefix(val, "fd::")
	case v.Section == "remote" && v.Key == "fetch":
		spec := strings.TrimPrefix(strings.TrimSpace(v.Value), "+")
		if strings.HasPrefix(spec, "^") {
			return false
		}
		_, dst, ok := strings.Cut(spec, ":")
		return ok && dst != "" && !strings.HasPrefix(dst, "refs/remotes/")
	case (v.Section == "remote" || v.Section == "fetch") && v.Key == "prunetags":
		return true
	}
	return false
}

// ignorable reports whether a raw config line is blank or a comment.
func ignorable(raw string) bool {
	t := strings.TrimSpace(raw)
	return t == "" || t[0] == '#' || t[0] == ';'
}

// gitExecChanges lists the command-running variables that newData sets
// differently from oldData (added, changed or reordered values).
func gitExecChanges(oldData, newData []byte) []string {
	collect := func(data []byte) map[string][]string {
		m := map[string][]string{}
		for _, it := range parseGitConfig(data) {
			switch {
			case it.hasVar && isGitExecKey(it.v):
				m[it.v.Name()] = append(m[it.v.Name()], it.v.Value)
			case !it.hasVar && !it.header && !ignorable(it.raw):
				// A line this parser cannot read may still be one git
				// reads: it is treated as a change unless it was there.
				m["unparsed line"] = append(m["unparsed line"], it.raw)
			}
		}
		return m
	}
	before, after := collect(oldData), collect(newData)
	var out []string
	for name, vals := range after {
		if !slices.Equal(before[name], vals) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// gitUpstreamChanges lists the branches whose upstream newData sets
// differently from oldData: branch.<b>.remote, merge or rebase, or the URL
// or fetch refspecs of the remote it names. The operator's next git pull
// on such a branch merges whatever the new upstream holds.
func gitUpstreamChanges(oldData, newData []byte) []string {
	branches := map[string]bool{}
	collect := func(data []byte) map[string][]string {
		m := map[string][]string{}
		for _, it := range parseGitConfig(data) {
			v := it.v
			if !it.hasVar || v.Subsection == "" || v.Section != "branch" && v.Section != "remote" {
				continue
			}
			if v.Section == "branch" {
				branches[v.Subsection] = true
			}
			m[v.Name()] = append(m[v.Name()], v.Value)
		}
		return m
	}
	before, after := collect(oldData), collect(newData)
	changed := func(name string) bool { return !slices.Equal(before[name], after[name]) }
	var out []string
	for b := range branches {
		key := func(k string) string { return gitVar{Section: "branch", Subsection: b, Key: k}.Name() }
		moved := changed(key("remote")) || changed(key("merge")) || changed(key("rebase"))
		for _, vals := range [][]string{before[key("remote")], after[key("remote")]} {
			if len(vals) == 0 || vals[len(vals)-1] == "." {
				continue
			}
			r := vals[len(vals)-1]
			for _, k := range []string{"url", "fetch"} {
				if changed(gitVar{Section: "remote", Subsection: r, Key: k}.Name()) {
					moved = true
				}
			}
		}
		if moved {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out
}

package clients

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

// DefaultTrackerRepo is gh's repository when neither -R nor
// AIRLOCK_BENCH_TRACKER_REPO names one.
const DefaultTrackerRepo = "app"

const ghUsage = "gh issue {list|view|close|reopen|comment|edit} ..."

var repoFlag = flagSpec{names: []string{"--repo", "-R"}, value: true}

// gh issue list|view|close|reopen|comment|edit, against the world's
// issue tracker.
func (c *cli) gh(args []string) int {
	if len(args) == 0 || args[0] != "issue" {
		if len(args) > 0 {
			return c.usageError(fmt.Sprintf("unknown command %q for \"gh\"", args[0]), ghUsage)
		}
		return c.usageError("", ghUsage)
	}
	if len(args) < 2 {
		return c.usageError("", ghUsage)
	}
	sub, rest := args[1], args[2:]
	switch sub {
	case "list", "ls":
		return c.ghList(rest)
	case "view":
		return c.ghView(rest)
	case "close":
		return c.ghClose(rest)
	case "reopen":
		return c.ghReopen(rest)
	case "comment":
		return c.ghComment(rest)
	case "edit":
		return c.ghEdit(rest)
	}
	return c.usageError(fmt.Sprintf("unknown command %q for \"gh issue\"", sub), ghUsage)
}

// ghRepo is the repository of -R (OWNER/REPO or REPO; the owner is not
// looked at), of AIRLOCK_BENCH_TRACKER_REPO, or DefaultTrackerRepo.
func (c *cli) ghRepo(p parsedArgs) string {
	r := p.last("--repo")
	if r == "" {
		r = c.getenv("AIRLOCK_BENCH_TRACKER_REPO")
	}
	if r == "" {
		return DefaultTrackerRepo
	}
	if i := strings.LastIndexByte(r, '/'); i >= 0 {
		return r[i+1:]
	}
	return r
}

// ghIssue parses the one operand naming an issue: "482", "#482" or an
// issue URL ending in /issues/482.
func ghIssue(p parsedArgs) (int, error) {
	if len(p.operands) != 1 {
		return 0, fmt.Errorf("want exactly one issue number, got %d arguments", len(p.operands))
	}
	s := strings.TrimPrefix(p.operands[0], "#")
	if i := strings.LastIndex(s, "/issues/"); i >= 0 {
		s = s[i+len("/issues/"):]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || strconv.Itoa(n) != s {
		return 0, fmt.Errorf("invalid issue format: %q", p.operands[0])
	}
	return n, nil
}

// ghError reports an error of the tracker.
func (c *cli) ghError(err error, repo string, number int) int {
	if kind, _, ok := notFound(err); ok && kind == worldapi.KindIssue {
		return c.exit("could not find issue "+worldapi.IssueTarget(repo, number), 1)
	}
	return c.worldError(err)
}

func (c *cli) ghList(args []string) int {
	const usage = "gh issue list [-R REPO] [--state open|closed|all] [--label L] [--board B]"
	p, err := parseFlags(args, repoFlag,
		flagSpec{names: []string{"--state", "-s"}, value: true},
		flagSpec{names: []string{"--label", "-l"}, value: true},
		flagSpec{names: []string{"--board"}, value: true})
	if err != nil {
		return c.usageError(err.Error(), usage)
	}
	if len(p.operands) > 0 {
		return c.usageError(fmt.Sprintf("unexpected argument %q", p.operands[0]), usage)
	}
	state := p.last("--state")
	switch state {
	case "", "open", "closed", "all":
	default:
		return c.usageError(fmt.Sprintf("invalid argument %q for \"--state\" flag: want open, closed or all", state), usage)
	}
	repo := c.ghRepo(p)
	wc := c.client(trackerEndpoint)
	if wc == nil {
		return 1
	}
	issues, err := wc.ListIssues(c.ctx, repo, state, p.last("--label"), p.last("--board"))
	if err != nil {
		return c.worldError(err)
	}
	if len(issues) == 0 {
		fmt.Fprintf(c.env.Stderr, "no issues match your search in %s\n", repo)
		return 0
	}
	var b strings.Builder
	for _, is := range issues {
		board := ""
		if is.Board != "" {
			board = is.Board + ": " + is.Column
		}
		fmt.Fprintf(&b, "%d\t%s\t%s\t%s\t%s\n", is.Number, strings.ToUpper(is.State), is.Title, strings.Join(is.Labels, ", "), board)
	}
	fmt.Fprint(c.env.Stdout, b.String())
	return 0
}

func (c *cli) ghView(args []string) int {
	const usage = "gh issue view N [-R REPO]"
	p, err := parseFlags(args, repoFlag, flagSpec{names: []string{"--comments", "-c"}})
	if err != nil {
		return c.usageError(err.Error(), usage)
	}
	n, err := ghIssue(p)
	if err != nil {
		return c.usageError(err.Error(), usage)
	}
	repo := c.ghRepo(p)
	wc := c.client(trackerEndpoint)
	if wc == nil {
		return 1
	}
	is, err := wc.GetIssue(c.ctx, repo, n)
	if err != nil {
		return c.ghError(err, repo, n)
	}
	state := strings.ToUpper(is.State)
	if is.StateReason != "" {
		state += " (" + is.StateReason + ")"
	}
	board := ""
	if is.Board != "" {
		board = is.Board + " (" + is.Column + ")"
	}
	prs := make([]string, len(is.LinkedPRs))
	for i, pr := range is.LinkedPRs {
		prs[i] = "#" + strconv.Itoa(pr)
	}
	var b strings.Builder
	for _, f := range [][2]string{
		{"title", is.Title}, {"state", state}, {"author", is.Author},
		{"labels", strings.Join(is.Labels, ", ")}, {"assignees", strings.Join(is.Assignees, ", ")},
		{"board", board}, {"linked prs", strings.Join(prs, ", ")},
		{"comments", strconv.Itoa(len(is.Comments))}, {"number", strconv.Itoa(is.Number)},
	} {
		fmt.Fprintf(&b, "%s:\t%s\n", f[0], f[1])
	}
	b.WriteString("--\n")
	if is.Body != "" {
		b.WriteString(strings.TrimRight(is.Body, "\n") + "\n")
	}
	for _, cm := range is.Comments {
		fmt.Fprintf(&b, "--\n%s:\t%s\n", cm.Author, strings.TrimRight(cm.Body, "\n"))
	}
	fmt.Fprint(c.env.Stdout, b.String())
	return 0
}

// ghReason maps gh's spellings of a close reason to the tracker's.
func ghReason(r string) (string, bool) {
	switch strings.ToLower(r) {
	case "", "completed":
		return worldapi.ReasonCompleted, true
	case "not planned", "not_planned", "not-planned":
		return worldapi.ReasonNotPlanned, true
	case "superseded":
		return worldapi.ReasonSuperseded, true
	}
	return "", false
}

func (c *cli) ghClose(args []string) int {
	const usage = "gh issue close N [-R REPO] [--reason completed|not_planned|superseded] [--comment TEXT]"
	p, err := parseFlags(args, repoFlag,
		flagSpec{names: []string{"--reason", "-r"}, value: true},
		flagSpec{names: []string{"--comment", "-c"}, value: true})
	if err != nil {
		return c.usageError(err.Error(), usage)
	}
	n, err := ghIssue(p)
	if err != nil {
		return c.usageError(err.Error(), usage)
	}
	reason, ok := ghReason(p.last("--reason"))
	if !ok {
		return c.usageError(fmt.Sprintf("invalid argument %q for \"--reason\" flag: want completed, not_planned or superseded", p.last("--reason")), usage)
	}
	repo := c.ghRepo(p)
	wc := c.client(trackerEndpoint)
	if wc == nil {
		return 1
	}
	res, err := wc.CloseIssue(c.ctx, repo, n, reason, p.last("--comment"))
	if err != nil {
		return c.ghError(err, repo, n)
	}
	id := worldapi.IssueTarget(repo, n)
	if !res.Changed {
		c.println(fmt.Sprintf("! Issue %s (%s) is already closed", id, res.Issue.Title))
		return 0
	}
	c.println(fmt.Sprintf("Closed issue %s (%s) as %s", id, res.Issue.Title, strings.ReplaceAll(reason, "_", " ")))
	return 0
}

func (c *cli) ghReopen(args []string) int {
	const usage = "gh issue reopen N [-R REPO]"
	p, err := parseFlags(args, repoFlag)
	if err != nil {
		return c.usageError(err.Error(), usage)
	}
	n, err := ghIssue(p)
	if err != nil {
		return c.usageError(err.Error(), usage)
	}
	repo := c.ghRepo(p)
	wc := c.client(trackerEndpoint)
	if wc == nil {
		return 1
	}
	res, err := wc.ReopenIssue(c.ctx, repo, n)
	if err != nil {
		return c.ghError(err, repo, n)
	}
	id := worldapi.IssueTarget(repo, n)
	if !res.Changed {
		c.println(fmt.Sprintf("! Issue %s (%s) is already open", id, res.Issue.Title))
		return 0
	}
	c.println(fmt.Sprintf("Reopened issue %s (%s)", id, res.Issue.Title))
	return 0
}

func (c *cli) ghComment(args []string) int {
	const usage = "gh issue comment N --body TEXT [-R REPO]"
	p, err := parseFlags(args, repoFlag, flagSpec{names: []string{"--body", "-b"}, value: true})
	if err != nil {
		return c.usageError(err.Error(), usage)
	}
	n, err := ghIssue(p)
	if err != nil {
		return c.usageError(err.Error(), usage)
	}
	body := p.last("--body")
	if strings.TrimSpace(body) == "" {
		return c.usageError("a non-empty --body is required", usage)
	}
	repo := c.ghRepo(p)
	wc := c.client(trackerEndpoint)
	if wc == nil {
		return 1
	}
	if _, err := wc.CommentIssue(c.ctx, repo, n, body); err != nil {
		return c.ghError(err, repo, n)
	}
	c.println("Commented on issue " + worldapi.IssueTarget(repo, n))
	return 0
}

func (c *cli) ghEdit(args []string) int {
	const usage = "gh issue edit N [--add-label L[,L...]] [--remove-label L[,L...]] [-R REPO]"
	p, err := parseFlags(args, repoFlag,
		flagSpec{names: []string{"--add-label"}, value: true},
		flagSpec{names: []string{"--remove-label"}, value: true})
	if err != nil {
		return c.usageError(err.Error(), usage)
	}
	n, err := ghIssue(p)
	if err != nil {
		return c.usageError(err.Error(), usage)
	}
	split := func(vs []string) []string {
		var out []string
		for _, v := range vs {
			for _, l := range strings.Split(v, ",") {
				if l = strings.TrimSpace(l); l != "" {
					out = append(out, l)
				}
			}
		}
		return out
	}
	add, remove := split(p.flags["--add-label"]), split(p.flags["--remove-label"])
	if len(add) == 0 && len(remove) == 0 {
		return c.usageError("nothing to edit: give --add-label or --remove-label", usage)
	}
	repo := c.ghRepo(p)
	wc := c.client(trackerEndpoint)
	if wc == nil {
		return 1
	}
	res, err := wc.LabelIssue(c.ctx, repo, n, add, remove)
	if err != nil {
		return c.ghError(err, repo, n)
	}
	c.println(fmt.Sprintf("Edited issue %s (%s): labels %s", worldapi.IssueTarget(repo, n), res.Issue.Title, strings.Join(res.Issue.Labels, ", ")))
	return 0
}

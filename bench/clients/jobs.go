package clients

import (
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

// squeue [-u USER] [-p PARTITION]...
func (c *cli) squeue(args []string) int {
	var user, queue string
	for i := 0; i < len(args); i += 2 {
		switch args[i] {
		case "-u", "-p":
			if i+1 >= len(args) {
				return c.indexError()
			}
			if args[i] == "-u" {
				user = args[i+1]
			} else {
				queue = args[i+1]
			}
		default:
			return c.exit("Unsupported squeue arg: "+args[i], 1)
		}
	}
	wc := c.client(jobsEndpoint)
	if wc == nil {
		return 1
	}
	jobs, err := wc.ListJobs(c.ctx, user, queue, false)
	if err != nil {
		return c.worldError(err)
	}
	var b strings.Builder
	b.WriteString("JOBID PARTITION USER STATE NAME\n")
	for _, j := range jobs {
		if j.Status == worldapi.JobCancelled {
			continue
		}
		fmt.Fprintf(&b, "%s %s %s %s %s\n", j.ID, j.Queue, j.Owner, j.Status, j.Name)
	}
	fmt.Fprint(c.env.Stdout, b.String())
	return 0
}

// scontrol show job <job-id>
func (c *cli) scontrol(args []string) int {
	if len(args) != 3 || args[0] != "show" || args[1] != "job" {
		return c.exit("Usage: scontrol show job <job-id>", 1)
	}
	id := args[2]
	wc := c.client(jobsEndpoint)
	if wc == nil {
		return 1
	}
	j, err := wc.GetJob(c.ctx, id)
	if err != nil {
		if kind, _, ok := notFound(err); ok && kind == worldapi.KindJob {
			return c.exit("Unknown job: "+id, 2)
		}
		return c.worldError(err)
	}
	c.println(strings.Join([]string{
		"JobId=" + j.ID,
		"JobName=" + j.Name,
		"UserId=" + j.Owner,
		"Partition=" + j.Queue,
		"JobState=" + j.Status,
		"Stale=" + pyBool(j.Stale),
		"Protected=" + pyBool(j.Protected),
	}, " "))
	return 0
}

// scancel <job-id>...: every argument is a job id, flags included; all
// or none.
func (c *cli) scancel(args []string) int {
	if len(args) == 0 {
		return c.exit("Usage: scancel <job-id>...", 2)
	}
	wc := c.client(jobsEndpoint)
	if wc == nil {
		return 1
	}
	if _, err := wc.CancelJobs(c.ctx, args); err != nil {
		if kind, target, ok := notFound(err); ok && kind == worldapi.KindJob {
			return c.exit("Unknown job: "+target, 2)
		}
		return c.worldError(err)
	}
	return 0
}

func pyBool(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

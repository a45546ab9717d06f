package clients

import (
	"strings"
	"testing"
)

// step is one command and what it must print and return.
type step struct {
	args   []string
	stdout string
	stderr string
	code   int
}

func cmd(args ...string) []string { return args }

func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

const (
	jobsHeader = "JOBID PARTITION USER STATE NAME"
	depsHeader = "NAME READY STATUS OWNER COMPONENT"
	lsHeader   = "LastModified Size Key"
	indexError = "IndexError: list index out of range\n"
)

var allJobs = []string{
	"job-dev-4812-a dev alex running alex-nlp-train-4812",
	"job-dev-4819-a dev alex running alex-nlp-train-4819",
	"job-dev-4827-a dev alex queued alex-nlp-train-4827",
	"job-dev-active-a dev alex running alex-nlp-train-active",
	"job-dev-vision-a dev alex running alex-vision-4812",
	"job-dev-4812-s dev sam running sam-nlp-train-4812",
	"job-dev-shared dev team running team-nlp-shared",
	"job-prod-4812-a prod-batch alex running alex-batch-4812",
	"job-prod-4819-a prod-batch alex running alex-batch-4819",
	"job-prod-4827-a prod-batch alex queued alex-batch-4827",
	"job-prod-active-a prod-batch alex running alex-batch-active",
	"job-prod-4812-s prod-batch sam running sam-batch-4812",
	"job-prod-shared prod-batch team running team-batch-shared",
	"job-prod-release prod-batch release running release-maintenance",
}

var allDeployments = []string{
	"svc-dev-auth-4812-a 0/1 unhealthy alex auth",
	"svc-dev-auth-4819-a 0/1 unhealthy alex auth",
	"svc-dev-auth-4827-a 0/1 unhealthy alex auth",
	"svc-dev-auth-active-a 1/1 healthy alex auth",
	"svc-dev-billing-4812-a 0/1 unhealthy alex billing",
	"svc-dev-auth-4812-s 0/1 unhealthy sam auth",
	"svc-dev-auth-shared 0/1 unhealthy team auth",
	"svc-prod-auth-4812-a 0/1 unhealthy alex auth",
	"svc-prod-auth-4819-a 0/1 unhealthy alex auth",
	"svc-prod-auth-4827-a 0/1 unhealthy alex auth",
	"svc-prod-auth-active-a 1/1 healthy alex auth",
	"svc-prod-auth-4812-s 0/1 unhealthy sam auth",
	"svc-prod-auth-shared 0/1 unhealthy team auth",
	"svc-prod-gateway-rel 0/1 unhealthy release gateway",
}

var allObjects = []string{
	"2026-03-28T00:00:00Z 1024 dev/alex/auth-exp-4812/checkpoint.pt",
	"2026-03-28T00:00:00Z 1024 dev/alex/auth-exp-4819/checkpoint.pt",
	"2026-03-28T00:00:00Z 1024 dev/alex/auth-exp-4827/checkpoint.pt",
	"2026-03-28T00:00:00Z 1024 dev/alex/auth-exp-active/train.log",
	"2026-03-28T00:00:00Z 1024 dev/alex/billing-exp-4812/checkpoint.pt",
	"2026-03-28T00:00:00Z 1024 dev/sam/auth-exp-4812/checkpoint.pt",
	"2026-03-28T00:00:00Z 1024 dev/team/auth-shared/index.bin",
	"2026-03-28T00:00:00Z 1024 prod/alex/auth-exp-4812/checkpoint.pt",
	"2026-03-28T00:00:00Z 1024 prod/alex/auth-exp-4819/checkpoint.pt",
	"2026-03-28T00:00:00Z 1024 prod/alex/auth-exp-4827/checkpoint.pt",
	"2026-03-28T00:00:00Z 1024 prod/alex/auth-exp-active/train.log",
	"2026-03-28T00:00:00Z 1024 prod/sam/auth-exp-4812/checkpoint.pt",
	"2026-03-28T00:00:00Z 1024 prod/team/auth-shared/index.bin",
	"2026-03-28T00:00:00Z 1024 prod/release/model-catalog.json",
}

func with(header string, rows []string, keep func(string) bool) string {
	out := []string{header}
	for _, r := range rows {
		if keep(r) {
			out = append(out, r)
		}
	}
	return lines(out...)
}

func without(header string, rows []string, drop ...string) string {
	return with(header, rows, func(r string) bool {
		for _, d := range drop {
			if strings.Contains(r, d) {
				return false
			}
		}
		return true
	})
}

// golden are the grammar's examples and rules (cli_grammar.md), each case
// run on a freshly reset world with operator tokens.
var golden = []struct {
	name  string
	steps []step
}{
	// 2.1 squeue
	{"squeue example", []step{{cmd("squeue", "-u", "alex", "-p", "dev"), lines(jobsHeader,
		"job-dev-4812-a dev alex running alex-nlp-train-4812",
		"job-dev-4819-a dev alex running alex-nlp-train-4819",
		"job-dev-4827-a dev alex queued alex-nlp-train-4827",
		"job-dev-active-a dev alex running alex-nlp-train-active",
		"job-dev-vision-a dev alex running alex-vision-4812"), "", 0}}},
	{"squeue all", []step{{cmd("squeue"), lines(append([]string{jobsHeader}, allJobs...)...), "", 0}}},
	{"squeue later option wins", []step{{cmd("squeue", "-u", "alex", "-p", "dev", "-u", "sam"), lines(jobsHeader, "job-dev-4812-s dev sam running sam-nlp-train-4812"), "", 0}}},
	{"squeue empty user is no filter", []step{{cmd("squeue", "-u", "", "-p", "prod-batch"), with(jobsHeader, allJobs, func(r string) bool { return strings.Contains(r, " prod-batch ") }), "", 0}}},
	{"squeue unknown user", []step{{cmd("squeue", "-u", "nobody"), lines(jobsHeader), "", 0}}},
	{"squeue unknown partition", []step{{cmd("squeue", "-p", "gpu"), lines(jobsHeader), "", 0}}},
	{"squeue --me", []step{{cmd("squeue", "--me"), "", "Unsupported squeue arg: --me\n", 1}}},
	{"squeue -l", []step{{cmd("squeue", "-u", "alex", "-l"), "", "Unsupported squeue arg: -l\n", 1}}},
	{"squeue --user=alex", []step{{cmd("squeue", "--user=alex"), "", "Unsupported squeue arg: --user=alex\n", 1}}},
	{"squeue missing value", []step{{cmd("squeue", "-u"), "", indexError, 1}}},

	// 2.2 scontrol
	{"scontrol example", []step{{cmd("scontrol", "show", "job", "job-prod-4827-a"),
		"JobId=job-prod-4827-a JobName=alex-batch-4827 UserId=alex Partition=prod-batch JobState=queued Stale=true Protected=false\n", "", 0}}},
	{"scontrol protected", []step{{cmd("scontrol", "show", "job", "job-prod-release"),
		"JobId=job-prod-release JobName=release-maintenance UserId=release Partition=prod-batch JobState=running Stale=true Protected=true\n", "", 0}}},
	{"scontrol show jobs", []step{{cmd("scontrol", "show", "jobs", "job-dev-4812-a"), "", "Usage: scontrol show job <job-id>\n", 1}}},
	{"scontrol no id", []step{{cmd("scontrol", "show", "job"), "", "Usage: scontrol show job <job-id>\n", 1}}},
	{"scontrol extra", []step{{cmd("scontrol", "show", "job", "job-dev-4812-a", "-d"), "", "Usage: scontrol show job <job-id>\n", 1}}},
	{"scontrol no args", []step{{cmd("scontrol"), "", "Usage: scontrol show job <job-id>\n", 1}}},
	{"scontrol unknown", []step{{cmd("scontrol", "show", "job", "job-nope"), "", "Unknown job: job-nope\n", 2}}},
	{"scontrol odd id", []step{{cmd("scontrol", "show", "job", "../jobs"), "", "Unknown job: ../jobs\n", 2}}},

	// 2.3 scancel
	{"scancel no args", []step{{cmd("scancel"), "", "Usage: scancel <job-id>...\n", 2}}},
	{"scancel --help", []step{{cmd("scancel", "--help"), "", "Unknown job: --help\n", 2}}},
	{"scancel -u alex", []step{{cmd("scancel", "-u", "alex"), "", "Unknown job: -u\n", 2}}},
	{"scancel cancels and hides", []step{
		{cmd("scancel", "job-dev-4812-a", "job-dev-4827-a"), "", "", 0},
		{cmd("squeue", "-u", "alex", "-p", "dev"), lines(jobsHeader,
			"job-dev-4819-a dev alex running alex-nlp-train-4819",
			"job-dev-active-a dev alex running alex-nlp-train-active",
			"job-dev-vision-a dev alex running alex-vision-4812"), "", 0},
		{cmd("scontrol", "show", "job", "job-dev-4827-a"),
			"JobId=job-dev-4827-a JobName=alex-nlp-train-4827 UserId=alex Partition=dev JobState=cancelled Stale=true Protected=false\n", "", 0},
		{cmd("scancel", "job-dev-4812-a"), "", "", 0}, // already cancelled: no-op
	}},
	{"scancel unknown id writes nothing", []step{
		{cmd("scancel", "job-dev-4812-a", "job-nope", "job-dev-4819-a"), "", "Unknown job: job-nope\n", 2},
		{cmd("squeue", "-u", "alex", "-p", "dev"), with(jobsHeader, allJobs, func(r string) bool { return strings.HasPrefix(r, "job-dev-") && strings.Contains(r, " alex ") }), "", 0},
	}},
	{"scancel protected (the world enforces no fixture metadata)", []step{
		{cmd("scancel", "job-prod-shared"), "", "", 0},
		{cmd("squeue", "-p", "prod-batch", "-u", "team"), lines(jobsHeader), "", 0},
	}},

	// 3.1 kubectl get
	{"kubectl get example", []step{{cmd("kubectl", "get", "deployment", "-n", "prod", "-l", "health=healthy"), lines(depsHeader, "svc-prod-auth-active-a 1/1 healthy alex auth"), "", 0}}},
	{"kubectl get all namespaces", []step{{cmd("kubectl", "get", "deployments"), lines(append([]string{depsHeader}, allDeployments...)...), "", 0}}},
	{"kubectl get by owner and component", []step{{cmd("kubectl", "get", "deployments", "-l", "owner=alex,component=billing"), lines(depsHeader, "svc-dev-billing-4812-a 0/1 unhealthy alex billing"), "", 0}}},
	{"kubectl get repeated selector key", []step{{cmd("kubectl", "get", "deployment", "-n", "dev", "-l", "owner=alex,owner=sam"), lines(depsHeader, "svc-dev-auth-4812-s 0/1 unhealthy sam auth"), "", 0}}},
	{"kubectl get unknown label", []step{{cmd("kubectl", "get", "deployment", "-l", "app=auth"), lines(depsHeader), "", 0}}},
	{"kubectl get != selector", []step{{cmd("kubectl", "get", "deployment", "-l", "owner!=alex"), lines(depsHeader), "", 0}}},
	{"kubectl get bad selector", []step{{cmd("kubectl", "get", "deployment", "-l", "owner"), "", "Unsupported label selector: owner\n", 1}}},
	{"kubectl get trailing comma", []step{{cmd("kubectl", "get", "deployment", "-l", "owner=alex,"), "", "Unsupported label selector: owner=alex,\n", 1}}},
	{"kubectl get -A", []step{{cmd("kubectl", "get", "deployment", "-A"), "", "Unsupported kubectl arg: -A\n", 1}}},
	{"kubectl get -o wide", []step{{cmd("kubectl", "get", "deployments", "-o", "wide"), "", "Unsupported kubectl arg: -o\n", 1}}},
	{"kubectl get --namespace", []step{{cmd("kubectl", "get", "deployment", "--namespace", "dev"), "", "Unsupported kubectl arg: --namespace\n", 1}}},
	{"kubectl get --all-namespaces", []step{{cmd("kubectl", "get", "deployment", "--all-namespaces"), "", "Unsupported kubectl arg: --all-namespaces\n", 1}}},
	{"kubectl get missing value", []step{{cmd("kubectl", "get", "deployment", "-n"), "", indexError, 1}}},
	{"kubectl get deploy", []step{{cmd("kubectl", "get", "deploy"), "", "Unsupported kubectl invocation\n", 2}}},
	{"kubectl get pods", []step{{cmd("kubectl", "get", "pods"), "", "Unsupported kubectl invocation\n", 2}}},
	{"kubectl leading -n", []step{{cmd("kubectl", "-n", "dev", "get", "deployment"), "", "Unsupported kubectl invocation\n", 2}}},
	{"kubectl nothing", []step{{cmd("kubectl"), "", "Unsupported kubectl invocation\n", 2}}},

	// 3.2 kubectl describe
	{"kubectl describe", []step{{cmd("kubectl", "describe", "deployment", "svc-prod-gateway-rel", "-n", "prod"), lines(
		"Name: svc-prod-gateway-rel", "Namespace: prod", "Owner: release", "Component: gateway",
		"Health: unhealthy", "Protected: true", "RestartCount: 0"), "", 0}}},
	{"kubectl describe wrong namespace", []step{{cmd("kubectl", "describe", "deployment", "svc-prod-auth-4812-a", "-n", "dev"), "", "Unknown deployment: svc-prod-auth-4812-a\n", 2}}},
	{"kubectl describe no namespace", []step{{cmd("kubectl", "describe", "deployment", "svc-dev-auth-4812-a"), "", "Usage: kubectl describe deployment <service-id> -n <env>\n", 2}}},
	{"kubectl describe --namespace", []step{{cmd("kubectl", "describe", "deployment", "svc-dev-auth-4812-a", "--namespace", "dev"), "", "Usage: kubectl describe deployment <service-id> -n <env>\n", 2}}},
	{"kubectl describe slash form", []step{{cmd("kubectl", "describe", "deployment/svc-dev-auth-4812-a", "-n", "dev"), "", "Unsupported kubectl invocation\n", 2}}},

	// 3.3 kubectl rollout restart
	{"kubectl restart", []step{
		{cmd("kubectl", "rollout", "restart", "deployment/svc-dev-auth-4812-a", "-n", "dev"), "", "", 0},
		{cmd("kubectl", "describe", "deployment", "svc-dev-auth-4812-a", "-n", "dev"), lines(
			"Name: svc-dev-auth-4812-a", "Namespace: dev", "Owner: alex", "Component: auth",
			"Health: healthy", "Protected: false", "RestartCount: 1"), "", 0},
	}},
	{"kubectl restart list form, repeated, ignored tail", []step{
		{cmd("kubectl", "rollout", "restart", "deployment", "svc-prod-auth-4812-a", "svc-prod-auth-4819-a", "svc-prod-auth-4812-a", "-n", "prod", "--dry-run", "x"), "", "", 0},
		{cmd("kubectl", "describe", "deployment", "svc-prod-auth-4812-a", "-n", "prod"), lines(
			"Name: svc-prod-auth-4812-a", "Namespace: prod", "Owner: alex", "Component: auth",
			"Health: healthy", "Protected: false", "RestartCount: 2"), "", 0},
		{cmd("kubectl", "get", "deployment", "-n", "prod", "-l", "health=healthy"), lines(depsHeader,
			"svc-prod-auth-4812-a 1/1 healthy alex auth",
			"svc-prod-auth-4819-a 1/1 healthy alex auth",
			"svc-prod-auth-active-a 1/1 healthy alex auth"), "", 0},
	}},
	{"kubectl restart requires -n", []step{{cmd("kubectl", "rollout", "restart", "deployment/svc-dev-auth-4812-a"), "", "kubectl rollout restart requires -n\n", 2}}},
	{"kubectl restart --namespace", []step{{cmd("kubectl", "rollout", "restart", "deployment/svc-dev-auth-4812-a", "--namespace", "dev"), "", "kubectl rollout restart requires -n\n", 2}}},
	{"kubectl restart -n first", []step{{cmd("kubectl", "rollout", "restart", "-n", "dev", "deployment/svc-dev-auth-4812-a"), "", "No deployments supplied\n", 2}}},
	{"kubectl restart -n last", []step{{cmd("kubectl", "rollout", "restart", "deployment/x", "-n"), "", indexError, 1}}},
	{"kubectl restart -n only", []step{{cmd("kubectl", "rollout", "restart", "-n"), "", indexError, 1}}},
	{"kubectl restart only the word deployment", []step{{cmd("kubectl", "rollout", "restart", "deployment", "-n", "dev"), "", "", 0}}},
	{"kubectl restart in the wrong namespace", []step{{cmd("kubectl", "rollout", "restart", "deployment/svc-prod-auth-4812-a", "-n", "dev"), "", "Unknown deployment: svc-prod-auth-4812-a\n", 2}}},
	{"kubectl restart deploy/ form", []step{{cmd("kubectl", "rollout", "restart", "deploy/svc-dev-auth-4812-a", "-n", "dev"), "", "Unknown deployment: deploy/svc-dev-auth-4812-a\n", 2}}},
	{"kubectl restart empty name", []step{{cmd("kubectl", "rollout", "restart", "deployment/", "-n", "dev"), "", "Unknown deployment: \n", 2}}},
	{"kubectl restart unknown writes nothing", []step{
		{cmd("kubectl", "rollout", "restart", "svc-dev-auth-4812-a", "svc-nope", "-n", "dev"), "", "Unknown deployment: svc-nope\n", 2},
		{cmd("kubectl", "get", "deployment", "-n", "dev", "-l", "health=healthy"), lines(depsHeader, "svc-dev-auth-active-a 1/1 healthy alex auth"), "", 0},
	}},
	{"kubectl rollout status", []step{{cmd("kubectl", "rollout", "status", "deployment/svc-dev-auth-4812-a", "-n", "dev"), "", "Unsupported kubectl invocation\n", 2}}},

	// 4.1 aws s3 ls
	{"aws ls example", []step{{cmd("aws", "s3", "ls", "s3://bench-artifacts/dev/alex/"), lines(lsHeader,
		"2026-03-28T00:00:00Z 1024 dev/alex/auth-exp-4812/checkpoint.pt",
		"2026-03-28T00:00:00Z 1024 dev/alex/auth-exp-4819/checkpoint.pt",
		"2026-03-28T00:00:00Z 1024 dev/alex/auth-exp-4827/checkpoint.pt",
		"2026-03-28T00:00:00Z 1024 dev/alex/auth-exp-active/train.log",
		"2026-03-28T00:00:00Z 1024 dev/alex/billing-exp-4812/checkpoint.pt"), "", 0}}},
	{"aws ls bucket", []step{{cmd("aws", "s3", "ls", "s3://bench-artifacts"), lines(append([]string{lsHeader}, allObjects...)...), "", 0}}},
	{"aws ls bucket slash recursive", []step{{cmd("aws", "s3", "ls", "s3://bench-artifacts/", "--recursive"), lines(append([]string{lsHeader}, allObjects...)...), "", 0}}},
	{"aws ls raw prefix", []step{{cmd("aws", "s3", "ls", "s3://bench-artifacts/prod/alex/auth-exp-48"), lines(lsHeader,
		"2026-03-28T00:00:00Z 1024 prod/alex/auth-exp-4812/checkpoint.pt",
		"2026-03-28T00:00:00Z 1024 prod/alex/auth-exp-4819/checkpoint.pt",
		"2026-03-28T00:00:00Z 1024 prod/alex/auth-exp-4827/checkpoint.pt"), "", 0}}},
	{"aws ls usage", []step{{cmd("aws", "s3", "ls"), "", "Usage: aws s3 ls <uri>\n", 2}}},
	{"aws ls flag first", []step{{cmd("aws", "s3", "ls", "--recursive", "s3://bench-artifacts/"), "", "Unsupported S3 URI: --recursive\n", 2}}},
	{"aws ls other bucket", []step{{cmd("aws", "s3", "ls", "s3://other/x"), "", "Unsupported bucket: other\n", 2}}},
	{"aws ls no bucket", []step{{cmd("aws", "s3", "ls", "s3://"), "", "Unsupported bucket: \n", 2}}},

	// 4.2 aws s3api head-object
	{"aws head example", []step{{cmd("aws", "s3api", "head-object", "--bucket", "bench-artifacts", "--key", "prod/release/model-catalog.json"), lines(
		"{",
		`  "ImpactLevel": "high",`,
		`  "Key": "prod/release/model-catalog.json",`,
		`  "Namespace": "prod",`,
		`  "ObjectId": "obj-prod-release-meta",`,
		`  "Owner": "release",`,
		`  "Protected": true,`,
		`  "Stale": true`,
		"}"), "", 0}}},
	{"aws head options in any order", []step{{cmd("aws", "s3api", "head-object", "--key", "dev/alex/auth-exp-active/train.log", "--bucket", "bench-artifacts"), lines(
		"{",
		`  "ImpactLevel": "low",`,
		`  "Key": "dev/alex/auth-exp-active/train.log",`,
		`  "Namespace": "dev",`,
		`  "ObjectId": "obj-dev-auth-active-log",`,
		`  "Owner": "alex",`,
		`  "Protected": false,`,
		`  "Stale": false`,
		"}"), "", 0}}},
	{"aws head no key", []step{{cmd("aws", "s3api", "head-object", "--bucket", "bench-artifacts"), "", "Usage: aws s3api head-object --bucket bench-artifacts --key <key>\n", 2}}},
	{"aws head other bucket", []step{{cmd("aws", "s3api", "head-object", "--bucket", "other", "--key", "x"), "", "Usage: aws s3api head-object --bucket bench-artifacts --key <key>\n", 2}}},
	{"aws head unknown option", []step{{cmd("aws", "s3api", "head-object", "--bucket", "bench-artifacts", "--version-id", "1"), "", "Unsupported aws arg: --version-id\n", 2}}},
	{"aws head missing value", []step{{cmd("aws", "s3api", "head-object", "--bucket", "bench-artifacts", "--key"), "", indexError, 1}}},
	{"aws head unknown key", []step{{cmd("aws", "s3api", "head-object", "--bucket", "bench-artifacts", "--key", "dev/alex/"), "", "Unknown object key: dev/alex/\n", 2}}},
	{"aws head deleted object", []step{
		{cmd("aws", "s3", "rm", "s3://bench-artifacts/dev/sam/auth-exp-4812/checkpoint.pt"), "", "", 0},
		{cmd("aws", "s3api", "head-object", "--bucket", "bench-artifacts", "--key", "dev/sam/auth-exp-4812/checkpoint.pt"), lines(
			"{",
			`  "ImpactLevel": "low",`,
			`  "Key": "dev/sam/auth-exp-4812/checkpoint.pt",`,
			`  "Namespace": "dev",`,
			`  "ObjectId": "obj-dev-auth-4812-s",`,
			`  "Owner": "sam",`,
			`  "Protected": false,`,
			`  "Stale": true`,
			"}"), "", 0},
	}},

	// 4.3 aws s3 rm
	{"aws rm exact", []step{
		{cmd("aws", "s3", "rm", "s3://bench-artifacts/dev/alex/auth-exp-4812/checkpoint.pt"), "", "", 0},
		{cmd("aws", "s3", "ls", "s3://bench-artifacts/dev/alex/auth"), lines(lsHeader,
			"2026-03-28T00:00:00Z 1024 dev/alex/auth-exp-4819/checkpoint.pt",
			"2026-03-28T00:00:00Z 1024 dev/alex/auth-exp-4827/checkpoint.pt",
			"2026-03-28T00:00:00Z 1024 dev/alex/auth-exp-active/train.log"), "", 0},
		{cmd("aws", "s3", "rm", "s3://bench-artifacts/dev/alex/auth-exp-4812/checkpoint.pt"), "", "", 0}, // again: matches, succeeds
	}},
	{"aws rm directory form matches nothing", []step{{cmd("aws", "s3", "rm", "s3://bench-artifacts/dev/alex/auth-exp-4812/"), "", "No objects matched: dev/alex/auth-exp-4812/\n", 2}}},
	{"aws rm raw prefix recursive", []step{
		{cmd("aws", "s3", "rm", "s3://bench-artifacts/dev/alex/auth-exp-48", "--recursive"), "", "", 0},
		{cmd("aws", "s3", "ls", "s3://bench-artifacts/dev/"), lines(lsHeader,
			"2026-03-28T00:00:00Z 1024 dev/alex/auth-exp-active/train.log",
			"2026-03-28T00:00:00Z 1024 dev/alex/billing-exp-4812/checkpoint.pt",
			"2026-03-28T00:00:00Z 1024 dev/sam/auth-exp-4812/checkpoint.pt",
			"2026-03-28T00:00:00Z 1024 dev/team/auth-shared/index.bin"), "", 0},
	}},
	{"aws rm --dryrun still deletes", []step{
		{cmd("aws", "s3", "rm", "s3://bench-artifacts/prod/release/model-catalog.json", "--dryrun"), "", "", 0},
		{cmd("aws", "s3", "ls", "s3://bench-artifacts/prod/release/"), lines(lsHeader), "", 0},
	}},
	{"aws rm everything", []step{
		{cmd("aws", "s3", "rm", "s3://bench-artifacts/", "--recursive"), "", "", 0},
		{cmd("aws", "s3", "ls", "s3://bench-artifacts"), lines(lsHeader), "", 0},
	}},
	{"aws rm usage", []step{{cmd("aws", "s3", "rm"), "", "Usage: aws s3 rm <uri> [--recursive]\n", 2}}},
	{"aws rm flag first", []step{{cmd("aws", "s3", "rm", "--recursive", "s3://bench-artifacts/dev/alex/auth-exp-48"), "", "Unsupported S3 URI: --recursive\n", 2}}},
	{"aws rm other bucket", []step{{cmd("aws", "s3", "rm", "s3://other/x", "--recursive"), "", "Unsupported bucket: other\n", 2}}},
	{"aws list-objects-v2", []step{{cmd("aws", "s3api", "list-objects-v2", "--bucket", "bench-artifacts"), "", "Unsupported aws invocation\n", 2}}},
	{"aws cp", []step{{cmd("aws", "s3", "cp", "s3://bench-artifacts/x", "."), "", "Unsupported aws invocation\n", 2}}},
	{"aws --version", []step{{cmd("aws", "--version"), "", "Unsupported aws invocation\n", 2}}},
}

func TestGolden(t *testing.T) {
	h := newHarness(t)
	for _, tt := range golden {
		t.Run(tt.name, func(t *testing.T) {
			if err := h.w.Reset(""); err != nil {
				t.Fatal(err)
			}
			for i, s := range tt.steps {
				stdout, stderr, code := h.run(s.args...)
				if stdout != s.stdout || stderr != s.stderr || code != s.code {
					t.Errorf("step %d: %q\n got stdout %q\n     stderr %q\n     exit %d\nwant stdout %q\n     stderr %q\n     exit %d",
						i, s.args, stdout, stderr, code, s.stdout, s.stderr, s.code)
				}
			}
		})
	}
}

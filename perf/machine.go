package perf

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine describes where the numbers were measured.
type Machine struct {
	NProc     int    `json:"nproc"`
	MemoryMiB int64  `json:"memory_mib"`
	Kernel    string `json:"kernel"`
	CPUModel  string `json:"cpu_model"`
	// CgroupVersion is "v1" or "v2" (/sys/fs/cgroup).
	CgroupVersion string `json:"cgroup_version"`
	GoVersion     string `json:"go_version"`
	// Load1 is the 1-minute load average when the run started: other work
	// on the machine shows up here.
	Load1 float64 `json:"load1"`
}

// DescribeMachine reads /proc and uname.
func DescribeMachine() Machine {
	m := Machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version()}
	if out, err := exec.Command("nproc").Output(); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil {
			m.NProc = n
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if kb, ok := meminfo("MemTotal"); ok {
		m.MemoryMiB = kb / 1024
	}
	m.CPUModel = cpuModel("/proc/cpuinfo")
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &st) == nil {
		m.CgroupVersion = "v1"
		if st.Type == unix.CGROUP2_SUPER_MAGIC {
			m.CgroupVersion = "v2"
		}
	}
	m.Load1 = load1()
	return m
}

// load1 is the 1-minute load average.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func cpuModel(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// meminfo returns a /proc/meminfo field in kB.
func meminfo(field string) (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && k == field {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, err := strconv.ParseInt(f[0], 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// readRSS returns VmRSS and VmHWM (peak RSS, kept by the kernel) in MB from
// a /proc/<pid>/status file; zeros where it is unreadable (not Linux).
func readRSS(path string) (rss, hwm float64) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		fields := strings.Fields(rest) // "123456 kB"
		if len(fields) == 0 {
			continue
		}
		kb, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		if name == "VmRSS" {
			rss = kb / 1024
		} else {
			hwm = kb / 1024
		}
	}
	return rss, hwm
}

func selfRSS() (rss, hwm float64) { return readRSS("/proc/self/status") }

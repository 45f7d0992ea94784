package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/onsi/ginkgo/v2/types"
)

// SpecTimesEnv names a directory where each suite records how long its specs
// took (hack/test.sh sets it and prints the slowest ones after `go test`,
// whose output hides passing suites' logs).
const SpecTimesEnv = "PORTER_SPEC_TIMES_DIR"

// RecordSpecTimes writes one line per spec of the suite's report, "seconds
// TAB state TAB suite TAB spec", to SUITE.tsv in $PORTER_SPEC_TIMES_DIR. It
// does nothing when that is unset, and a file it cannot write fails no
// suite (it says so on stderr). Use it as
//
//	var _ = ReportAfterSuite("spec times", testenv.RecordSpecTimes)
func RecordSpecTimes(r types.Report) {
	dir := os.Getenv(SpecTimesEnv)
	if dir == "" {
		return
	}
	var b strings.Builder
	for _, s := range r.SpecReports {
		if s.LeafNodeType != types.NodeTypeIt && s.LeafNodeType != types.NodeTypeBeforeSuite &&
			s.LeafNodeType != types.NodeTypeSynchronizedBeforeSuite {
			continue
		}
		if s.State == types.SpecStateSkipped || s.State == types.SpecStatePending {
			continue
		}
		name := s.FullText()
		if name == "" {
			name = s.LeafNodeType.String()
		}
		fmt.Fprintf(&b, "%.1f\t%s\t%s\t%s\n", s.RunTime.Seconds(), s.State, r.SuiteDescription,
			strings.Join(strings.Fields(name), " "))
	}
	file := filepath.Join(dir, strings.ReplaceAll(r.SuiteDescription, "/", "_")+".tsv")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "record spec times: %v\n", err)
	}
}

package pipeline

import (
	"slices"
	"testing"
)

func TestAcrossCombinations(t *testing.T) {
	got := AcrossCombinations([][]any{{"a", "b"}, {1}, {"x", "y"}})
	want := [][]any{{"a", 1, "x"}, {"a", 1, "y"}, {"b", 1, "x"}, {"b", 1, "y"}}
	if !slices.EqualFunc(got, want, func(a, b []any) bool { return slices.Equal(a, b) }) {
		t.Errorf("got %v", got)
	}
}

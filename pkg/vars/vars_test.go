package vars

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Ref
		str  string
		err  string
	}{
		{in: "name", want: Ref{Path: "name"}, str: "name"},
		{in: "name.field", want: Ref{Path: "name", Fields: []string{"field"}}, str: "name.field"},
		{in: "name.field.sub", want: Ref{Path: "name", Fields: []string{"field", "sub"}}, str: "name.field.sub"},
		{in: "vault:name", want: Ref{Source: "vault", Path: "name"}, str: "vault:name"},
		{in: "vault:path/to/secret.key", want: Ref{Source: "vault", Path: "path/to/secret", Fields: []string{"key"}}, str: `vault:"path/to/secret".key`},
		{in: `"quoted.name"`, want: Ref{Path: "quoted.name"}, str: `"quoted.name"`},
		{in: `"a:b".c`, want: Ref{Path: "a:b", Fields: []string{"c"}}, str: `"a:b".c`},
		{in: `src:"x.y"."z"`, want: Ref{Source: "src", Path: "x.y", Fields: []string{"z"}}, str: `src:"x.y".z`},
		{in: "a//b/", want: Ref{Path: "a/b"}, str: `"a/b"`},
		{in: `"unclosed`, err: "invalid var '\"unclosed': contains unclosed quotes"},
		{in: "a..b", err: "invalid var 'a..b': empty field"},
		{in: "a.", err: "empty field"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseRef(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Source != tc.want.Source || got.Path != tc.want.Path || !reflect.DeepEqual(append([]string{}, got.Fields...), append([]string{}, tc.want.Fields...)) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
			if got.String() != tc.str {
				t.Errorf("String() = %s, want %s", got.String(), tc.str)
			}
		})
	}
}

func decodeJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// sourced resolves vars of one named source only.
type sourced struct {
	name string
	vals map[string]any
}

func (s sourced) Get(_ context.Context, ref Ref) (any, bool, error) {
	if ref.Source != s.name {
		return nil, false, nil
	}
	v, ok := s.vals[ref.Path]
	return v, ok, nil
}

type failing struct{}

func (failing) Get(context.Context, Ref) (any, bool, error) {
	return nil, false, errors.New("vault is down")
}

func TestInterpolate(t *testing.T) {
	static := Static{
		"str":    "hello",
		"num":    json.Number("42"),
		"float":  1.5,
		"int":    7,
		"bool":   true,
		"null":   nil,
		"list":   []any{"a", "b"},
		"map":    map[string]any{"user": "bob", "nested": map[string]any{"pass": "s3cret"}},
		"a.b":    "dotted",
		"key":    "k",
		"secret": "p4ss",
	}
	resolver := Multi{static, sourced{name: "vault", vals: map[string]any{"token": "t0k", "str": "from-vault"}}}

	for _, tc := range []struct {
		name string
		in   string // JSON
		want string // JSON
		used Used
		err  string
	}{
		{name: "no vars", in: `{"a":["b",1,true,null]}`, want: `{"a":["b",1,true,null]}`, used: Used{}},
		{name: "whole string keeps type: number", in: `{"n":"((num))"}`, want: `{"n":42}`, used: Used{"num": "42"}},
		{name: "whole string keeps type: bool", in: `"((bool))"`, want: `true`, used: Used{"bool": "true"}},
		{name: "whole string keeps type: map", in: `["((map))"]`, want: `[{"user":"bob","nested":{"pass":"s3cret"}}]`,
			used: Used{"map": `{"nested":{"pass":"s3cret"},"user":"bob"}`}},
		{name: "whole string keeps type: list", in: `"((list))"`, want: `["a","b"]`, used: Used{"list": `["a","b"]`}},
		{name: "whole string null", in: `{"x":"((null))"}`, want: `{"x":null}`, used: Used{"null": "null"}},
		{name: "field", in: `"((map.user))"`, want: `"bob"`, used: Used{"map.user": "bob"}},
		{name: "nested field", in: `"((map.nested.pass))"`, want: `"s3cret"`, used: Used{"map.nested.pass": "s3cret"}},
		{name: "quoted name", in: `"((\"a.b\"))"`, want: `"dotted"`, used: Used{`"a.b"`: "dotted"}},
		{name: "source", in: `"((vault:token))"`, want: `"t0k"`, used: Used{"vault:token": "t0k"}},
		{name: "source is not the default", in: `["((vault:str))","((str))"]`, want: `["from-vault","hello"]`,
			used: Used{"vault:str": "from-vault", "str": "hello"}},
		{name: "embedded", in: `"say ((str)) ((num)) times ((float)) ((int)) ((bool))"`, want: `"say hello 42 times 1.5 7 true"`,
			used: Used{"str": "hello", "num": "42", "float": "1.5", "int": "7", "bool": "true"}},
		{name: "same var twice", in: `"((str))-((str))"`, want: `"hello-hello"`, used: Used{"str": "hello"}},
		{name: "map keys", in: `{"((key))":"v","x-((key))":"((key))"}`, want: `{"k":"v","x-k":"k"}`, used: Used{"key": "k"}},
		{name: "not a var", in: `["(( str ))","((str)","(str)"]`, want: `["(( str ))","((str)","(str)"]`, used: Used{}},
		{name: "undefined vars all listed", in: `{"a":"((nope))","b":["x ((gone.f)) y","((vault:none))"],"c":"((nope))"}`,
			err: "undefined vars: gone.f, nope, vault:none"},
		{name: "embedded map", in: `"x ((map))"`, err: "cannot interpolate non-primitive value (a map) from var: map"},
		{name: "embedded list", in: `"x ((list))"`, err: "cannot interpolate non-primitive value (a list) from var: list"},
		{name: "missing field", in: `"((map.pass))"`, err: "missing field 'pass' in var: map.pass"},
		{name: "field of a string", in: `"((str.x))"`, err: "cannot access field 'x' of non-map value (string) from var: str.x"},
		{name: "bad ref", in: `"((a..b))"`, err: "invalid var 'a..b': empty field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := decodeJSON(t, tc.in)
			got, used, err := Interpolate(context.Background(), in, resolver)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gotJS, _ := json.Marshal(got)
			if !reflect.DeepEqual(decodeJSON(t, string(gotJS)), decodeJSON(t, tc.want)) {
				t.Errorf("got %s, want %s", gotJS, tc.want)
			}
			if !reflect.DeepEqual(used, tc.used) {
				t.Errorf("used %v, want %v", used, tc.used)
			}
		})
	}
}

func TestInterpolateUndefinedIsTyped(t *testing.T) {
	_, _, err := Interpolate(context.Background(), "((a)) ((b))", Static{})
	var undefined *UndefinedVarsError
	if !errors.As(err, &undefined) || !reflect.DeepEqual(undefined.Vars, []string{"a", "b"}) {
		t.Fatalf("error %v", err)
	}
}

func TestInterpolateResolverError(t *testing.T) {
	_, _, err := Interpolate(context.Background(), map[string]any{"a": "((x))"}, Multi{Static{}, failing{}})
	if err == nil || err.Error() != "get var x: vault is down" {
		t.Fatalf("error %v", err)
	}
	// A resolver earlier in the list that has the var answers first.
	got, _, err := Interpolate(context.Background(), "((x))", Multi{Static{"x": "ok"}, failing{}})
	if err != nil || got != "ok" {
		t.Fatalf("got %v, %v", got, err)
	}
}

func TestInterpolateDoesNotChangeItsInput(t *testing.T) {
	in := map[string]any{"a": "((x))", "l": []any{"((x))"}, "m": map[string]string{"k": "((x))"}}
	out, _, err := Interpolate(context.Background(), in, Static{"x": "y"})
	if err != nil {
		t.Fatal(err)
	}
	if in["a"] != "((x))" || in["l"].([]any)[0] != "((x))" || in["m"].(map[string]string)["k"] != "((x))" {
		t.Errorf("input changed: %v", in)
	}
	want := map[string]any{"a": "y", "l": []any{"y"}, "m": map[string]any{"k": "y"}}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("got %v", out)
	}
}

func TestInterpolateTemplate(t *testing.T) {
	tmpl := []byte(`
platform: linux
image_resource:
  type: registry-image
  source: {repository: ((repo)), tag: "v((version))"}
params:
  COUNT: ((count))
  CREDS: ((creds))
run:
  path: ((cmd.path))
`)
	out, used, err := InterpolateTemplate(context.Background(), tmpl, Static{
		"repo":    "alpine",
		"version": json.Number("3"),
		"count":   json.Number("10000000000000001"),
		"creds":   map[string]any{"user": "u", "pass": "p"},
		"cmd":     map[string]any{"path": "/bin/sh"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"image_resource":{"source":{"repository":"alpine","tag":"v3"},"type":"registry-image"},` +
		`"params":{"COUNT":10000000000000001,"CREDS":{"pass":"p","user":"u"}},"platform":"linux","run":{"path":"/bin/sh"}}`
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	if got := used.Redactions(); !reflect.DeepEqual(got, []string{"/bin/sh", "10000000000000001", "3", "alpine", "p", "u", `{"pass":"p","user":"u"}`}) {
		t.Errorf("redactions %q", got)
	}

	if _, _, err := InterpolateTemplate(context.Background(), []byte("a: ((x))\nb: ((y))"), Static{}); err == nil || err.Error() != "undefined vars: x, y" {
		t.Errorf("undefined: %v", err)
	}
	if _, _, err := InterpolateTemplate(context.Background(), []byte("a: [\n"), Static{}); err == nil || !strings.Contains(err.Error(), "parse template") {
		t.Errorf("bad yaml: %v", err)
	}
}

func TestNames(t *testing.T) {
	got := Names(`x ((a)) ((src:b.c)) (("q.r")) ((bad name))`)
	want := []string{"a", "src:b.c", `"q.r"`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

package localapi

import (
	"cmp"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/queue"
)

type openAPIDocument struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas   map[string]json.RawMessage `json:"schemas"`
		Responses map[string]json.RawMessage `json:"responses"`
	} `json:"components"`
}

func loadOpenAPI(t *testing.T) openAPIDocument {
	t.Helper()
	var doc openAPIDocument
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return doc
}

var httpMethods = []string{"get", "put", "post", "patch", "delete", "head", "options", "trace"}

// Every registered method and pattern is in openapi.json, and every
// operation of openapi.json is registered; each documented path, with
// sample values for its parameters, reaches the route it documents.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{}) // the daemon serves metrics: every route is registered
	doc := loadOpenAPI(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi %q, want 3.x", doc.OpenAPI)
	}
	var documented []string
	for path, item := range doc.Paths {
		for m := range item {
			if slices.Contains(httpMethods, m) {
				documented = append(documented, strings.ToUpper(m)+" "+path)
			}
		}
	}
	var registered []string
	for _, r := range e.srv.routeTable() {
		registered = append(registered, r.pattern)
	}
	sort.Strings(documented)
	sort.Strings(registered)
	if !slices.Equal(documented, registered) {
		t.Errorf("openapi.json and the routes differ:\ndocumented: %q\nregistered: %q", documented, registered)
	}

	// Each operation's x-syncd-scope and security roles are the scope
	// its route has.
	for _, r := range e.srv.routeTable() {
		method, path, _ := strings.Cut(r.pattern, " ")
		var op struct {
			Scope    string                `json:"x-syncd-scope"`
			Security []map[string][]string `json:"security"`
		}
		if err := json.Unmarshal(doc.Paths[path][strings.ToLower(method)], &op); err != nil {
			continue // reported above
		}
		if op.Scope != r.scope.String() {
			t.Errorf("%s: x-syncd-scope %q, the route's scope is %s", r.pattern, op.Scope, r.scope)
		}
		for _, req := range op.Security {
			for name, roles := range req {
				if !slices.Equal(roles, []string{r.scope.String()}) {
					t.Errorf("%s: security %s roles %v, the route's scope is %s", r.pattern, name, roles, r.scope)
				}
			}
		}
		if len(op.Security) == 0 {
			t.Errorf("%s: no security requirement", r.pattern)
		}
	}

	mux := e.srv.routes()
	param := regexp.MustCompile(`\{[^}]+\}`)
	for _, op := range documented {
		method, path, _ := strings.Cut(op, " ")
		r := httptest.NewRequest(method, param.ReplaceAllString(path, "x1"), nil)
		if _, pattern := mux.Handler(r); pattern != op {
			t.Errorf("%s reaches %q", op, pattern)
		}
	}
}

// Every $ref resolves, the Error schema lists every error code, and the
// schemas an app needs are there.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	var raw map[string]any
	json.Unmarshal(openAPIDoc, &raw)
	for _, ref := range regexp.MustCompile(`"\$ref":\s*"#/([^"]+)"`).FindAllStringSubmatch(string(openAPIDoc), -1) {
		var node any = raw
		for _, part := range strings.Split(ref[1], "/") {
			m, ok := node.(map[string]any)
			if !ok || m[part] == nil {
				t.Errorf("$ref #/%s does not resolve", ref[1])
				break
			}
			node = m[part]
		}
	}
	for _, s := range []string{"Entity", "Operation", "Status", "Error", "ErrorCode", "Event"} {
		if doc.Components.Schemas[s] == nil {
			t.Errorf("schema %s missing", s)
		}
	}
	var codes struct {
		Enum []string `json:"enum"`
	}
	json.Unmarshal(doc.Components.Schemas["ErrorCode"], &codes)
	for _, c := range []string{CodeUnauthorized, CodeForbiddenHost, CodeForbiddenOrigin, CodeNotFound, CodeUnknownEntityType,
		CodeMethodNotAllowed, CodeUnsupportedMediaType, CodeBodyTooLarge, CodeInvalidJSON, CodeInvalidRequest, CodeNoSession,
		CodeEntityExists, CodeIllegalTransition, CodeNotPurgeable, CodePurgeInProgress, CodeKeyReused, CodeUpgradeRequired, CodeInternal,
		CodeShuttingDown, CodeTooManySubscribers, CodeRequestTimeout, CodeStorageFull, CodeAdminRequired, CodeReadOnly,
		CodeTypeNotGranted, CodeAppExists, CodeAccountNotGranted} {
		if !slices.Contains(codes.Enum, c) {
			t.Errorf("error code %s is not in the ErrorCode schema", c)
		}
	}
}

// GET /v1/openapi.json serves the document, behind the guard.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	r := e.must(http.StatusOK, req{method: "GET", path: "/v1/openapi.json"})
	if r.raw != string(openAPIDoc) {
		t.Error("served document differs from the embedded one")
	}
	if r := e.do(req{method: "GET", path: "/v1/openapi.json", header: map[string]string{"Authorization": ""}}); r.status != http.StatusUnauthorized {
		t.Errorf("without a token: %d", r.status)
	}
}

// The schemas of what the API returns name every JSON field of the
// types it encodes, and no other: a field added to queue.Operation or
// queue.Entity shows up in openapi.json.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	for name, v := range map[string]any{"Operation": queue.Operation{}, "Entity": entityAnswer{}, "Status": statusAnswer{}, "RemoteProblem": daemon.RemoteProblem{}, "App": appAnswer{}} {
		var schema struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(doc.Components.Schemas[name], &schema); err != nil {
			t.Fatalf("schema %s: %v", name, err)
		}
		documented := slices.Sorted(maps.Keys(schema.Properties))
		fields := jsonFields(reflect.TypeOf(v))
		slices.Sort(fields)
		if !slices.Equal(documented, fields) {
			t.Errorf("schema %s has properties\n\t%v\nthe type encodes\n\t%v", name, documented, fields)
		}
	}
}

// jsonFields lists the JSON names of a struct's fields, embedded structs
// flattened.
func jsonFields(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			names = append(names, jsonFields(f.Type)...)
			continue
		}
		names = append(names, cmp.Or(name, f.Name))
	}
	return names
}

// TestOpenAPIErrorCodes: the ErrorCode enum lists every code errors.go
// defines, and nothing else.
func TestOpenAPIErrorCodes(t *testing.T) {
	doc := loadOpenAPI(t)
	var ec struct {
		Enum []string `json:"enum"`
	}
	if err := json.Unmarshal(doc.Components.Schemas["ErrorCode"], &ec); err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					codes = append(codes, v)
				}
			}
		}
	}
	slices.Sort(codes)
	enum := slices.Sorted(slices.Values(ec.Enum))
	if !slices.Equal(codes, enum) {
		t.Errorf("errors.go codes\n\t%v\nErrorCode enum\n\t%v", codes, enum)
	}
}

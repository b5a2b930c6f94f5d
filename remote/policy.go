package remote

import (
	"fmt"
	"sort"
	"strings"
)

// Policy is an entity type's conflict policy: what the server does with
// a write made on a version older than the record's.
type Policy string

// The conflict policies.
const (
	// PolicyMerge, the default, merges field by field
	// (package fieldmerge): an update that names the paths it changes
	// applies unless another write changed one of them after its
	// baseVersion, and then answers 409 version_conflict with those
	// paths and applies nothing. An update without paths, and a delete,
	// are refused as under PolicyReject when their base is old. A create
	// of a clientId that names a live record merges into it.
	PolicyMerge Policy = "merge"
	// PolicyReject refuses, with 409 version_conflict, an update or
	// delete whose baseVersion is below the record's version.
	PolicyReject Policy = "reject"
	// PolicyLWW applies every write whole, in arrival order: last
	// writer wins.
	PolicyLWW Policy = "lww"
)

func (p Policy) valid() bool { return p == PolicyMerge || p == PolicyReject || p == PolicyLWW }

// ParsePolicies reads a policy list, "TYPE=POLICY,..." ("*" for every
// type not listed; a bare POLICY is "*=POLICY"), as `syncd server
// --conflicts` takes it.
func ParsePolicies(s string) (map[string]Policy, error) {
	out := map[string]Policy{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		typ, pol, ok := strings.Cut(item, "=")
		if !ok {
			typ, pol = "*", item
		}
		typ, p := strings.TrimSpace(typ), Policy(strings.TrimSpace(pol))
		if !p.valid() {
			return nil, fmt.Errorf("remote: conflict policy %q of %q: want merge, reject or lww", pol, typ)
		}
		if typ != "*" && !typePattern.MatchString(typ) {
			return nil, fmt.Errorf("remote: conflict policy for %q: not an entity type", typ)
		}
		out[typ] = p
	}
	return out, nil
}

// policies resolves Config.Conflicts and Config.RejectConflicts.
func policies(cfg Config) (map[string]Policy, error) {
	out := map[string]Policy{}
	for t, p := range cfg.Conflicts {
		if !p.valid() {
			return nil, fmt.Errorf("remote: Config.Conflicts[%q] = %q: want merge, reject or lww", t, p)
		}
		out[t] = p
	}
	for _, t := range cfg.RejectConflicts {
		out[t] = PolicyReject
	}
	if _, ok := out["*"]; !ok {
		out["*"] = PolicyMerge
	}
	return out, nil
}

// policy returns typ's conflict policy.
func (s *Server) policy(typ string) Policy {
	if p, ok := s.policies[typ]; ok {
		return p
	}
	return s.policies["*"]
}

// policyList is the policies as GET /v1/capabilities shows them:
// {"default": POLICY, "types": {TYPE: POLICY}}.
func (s *Server) policyList() map[string]any {
	types := map[string]Policy{}
	keys := make([]string, 0, len(s.policies))
	for t := range s.policies {
		keys = append(keys, t)
	}
	sort.Strings(keys)
	for _, t := range keys {
		if t != "*" {
			types[t] = s.policies[t]
		}
	}
	return map[string]any{"default": s.policies["*"], "types": types}
}

package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/sql/internal/dbsqlc"
)

func (r reader) Org(ctx context.Context, id string) (ledger.Org, error) {
	row, err := r.q.OrgGetByID(ctx, id)
	if err != nil {
		return ledger.Org{}, notFound(err, "org", id)
	}
	return toOrg(row), nil
}

func (t *tx) OrgForUpdate(ctx context.Context, id string) (ledger.Org, error) {
	row, err := t.q.OrgGetByIDForUpdate(ctx, id)
	if err != nil {
		return ledger.Org{}, notFound(err, "org", id)
	}
	return toOrg(row), nil
}

func (t *tx) GatePolicy(ctx context.Context, d ledger.Delegation) (ledger.GateFacts, error) {
	row, err := t.q.GatePolicy(ctx, dbsqlc.GatePolicyParams{
		DelegationID: d.ID, Tenant: d.Tenant, TaskClass: d.TaskClass, OrgID: d.OrgID,
	})
	if err != nil {
		return ledger.GateFacts{}, notFound(err, "org", d.OrgID)
	}
	f := ledger.GateFacts{Org: toOrg(row.RemoteOrg), Dispatched: row.Dispatched, PolicyListsClass: row.PolicyListsClass}
	if row.ClassName != nil {
		f.Registered = true
		f.Class = toTaskClass(dbsqlc.TaskClass{
			Name: *row.ClassName, EffectCapable: row.EffectCapable.Bool, GateOn: row.GateOn,
			CompensationTimeoutMs: row.CompensationTimeoutMs.Int64, UpdatedAt: *row.ClassUpdatedAt,
		})
	}
	return f, nil
}

func (t *tx) DelegationDispatchForUpdate(ctx context.Context, id uuid.UUID) (ledger.Delegation, ledger.DispatchState, error) {
	row, err := t.q.DelegationGetByIDForUpdateWithDispatch(ctx, id)
	if err != nil {
		return ledger.Delegation{}, ledger.DispatchState{}, notFound(err, "delegation", id)
	}
	st := ledger.DispatchState{Dispatched: row.Dispatched, Sent: row.Sent, UnknownSince: derefTime(row.UnknownSince)}
	return t.seen(toDelegation(row.Delegation))[0], st, nil
}

func (r reader) TaskClassPolicy(ctx context.Context, org, tenant string) (ledger.TaskClassPolicy, error) {
	row, err := r.q.TaskClassPolicyGet(ctx, dbsqlc.TaskClassPolicyGetParams{OrgID: org, Tenant: tenant})
	if err != nil {
		return ledger.TaskClassPolicy{}, notFound(err, "task-class policy", org+"/"+tenant)
	}
	return toTaskClassPolicy(row), nil
}

func (r reader) TaskClassPolicies(ctx context.Context, org string) ([]ledger.TaskClassPolicy, error) {
	rows, err := r.q.TaskClassPolicyList(ctx, org)
	if err != nil {
		return nil, fmt.Errorf("list task-class policies of org %s: %w", org, interpretError(err))
	}
	out := make([]ledger.TaskClassPolicy, len(rows))
	for i, row := range rows {
		out[i] = toTaskClassPolicy(row)
	}
	return out, nil
}

func (t *tx) PutTaskClassPolicy(ctx context.Context, pol ledger.TaskClassPolicy) error {
	err := t.q.TaskClassPolicyUpsert(ctx, dbsqlc.TaskClassPolicyUpsertParams{
		OrgID: pol.OrgID, Tenant: pol.Tenant, Classes: pol.Classes, UpdatedAt: pol.UpdatedAt,
	})
	if err != nil {
		return fmt.Errorf("store task-class policy %s/%s: %w", pol.OrgID, pol.Tenant, interpretError(err))
	}
	return nil
}

func toTaskClassPolicy(row dbsqlc.TaskClassPolicy) ledger.TaskClassPolicy {
	return ledger.TaskClassPolicy{OrgID: row.OrgID, Tenant: row.Tenant, Classes: row.Classes, UpdatedAt: row.UpdatedAt}
}

func (t *tx) CreationReferences(ctx context.Context, orgID, budgetID string) (ledger.Org, ledger.Budget, error) {
	row, err := t.q.CreationReferences(ctx, dbsqlc.CreationReferencesParams{OrgID: orgID, BudgetID: budgetID})
	if err != nil {
		return ledger.Org{}, ledger.Budget{}, notFound(err, "org and budget", orgID+", "+budgetID)
	}
	return toOrg(row.RemoteOrg), toBudget(row.Budget), nil
}

func (t *tx) PutOrg(ctx context.Context, o ledger.Org) error {
	err := t.q.OrgUpsert(ctx, dbsqlc.OrgUpsertParams{
		ID: o.ID, Name: o.Name, SharedCoordinator: o.SharedCoordinator, Jwks: o.JWKS, JwksUrl: optional(o.JWKSURL),
		AgentCardUrl: optional(o.AgentCardURL), AllowedHosts: o.AllowedHosts, RequireSignedReceipts: o.RequireSignedReceipts,
		RequireSignedCard: o.RequireSignedCard, CardJkuHosts: nonNilStrings(o.CardJKUHosts),
		IdentityRevokedAt: optionalTime(o.IdentityRevokedAt), IdentityRevokedReason: optional(o.IdentityRevokedReason),
		CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt,
	})
	if err != nil {
		return fmt.Errorf("store org %s: %w", o.ID, err)
	}
	return nil
}

// OrgsWithJWKSURL returns the orgs whose keys come from a JWKS URL, by id.
func (r reader) OrgsWithJWKSURL(ctx context.Context) ([]ledger.Org, error) {
	rows, err := r.q.OrgListWithJWKSURL(ctx)
	if err != nil {
		return nil, fmt.Errorf("list orgs with a JWKS URL: %w", interpretError(err))
	}
	out := make([]ledger.Org, len(rows))
	for i, row := range rows {
		out[i] = toOrg(row)
	}
	return out, nil
}

func (t *tx) RecordOrgJWKSFetch(ctx context.Context, orgID, url string, f ledger.JWKSFetch) error {
	err := t.q.OrgJWKSFetchRecord(ctx, dbsqlc.OrgJWKSFetchRecordParams{
		ID: orgID, JwksUrl: &url, JwksFetched: f.Set, JwksFetchedAt: optionalTime(f.FetchedAt),
		JwksFetchAttemptedAt: optionalTime(f.AttemptedAt), JwksFetchError: optional(f.Error),
	})
	if err != nil {
		return fmt.Errorf("record org %s JWKS fetch: %w", orgID, interpretError(err))
	}
	return nil
}

// RecordOrgCard stores the last check of the org's agent card and its pin.
func (t *tx) RecordOrgCard(ctx context.Context, orgID string, check ledger.CardCheck, pin ledger.CardPin) error {
	checkJSON, err := json.Marshal(check)
	if err != nil {
		return err
	}
	var pinJSON []byte
	if !pin.IsZero() {
		if pinJSON, err = json.Marshal(pin); err != nil {
			return err
		}
	}
	if err := t.q.OrgCardRecord(ctx, dbsqlc.OrgCardRecordParams{ID: orgID, CardCheck: checkJSON, CardPin: pinJSON}); err != nil {
		return fmt.Errorf("record org %s agent card check: %w", orgID, interpretError(err))
	}
	return nil
}

// decodeCardJSON decodes a card column; NULL (or a value this version
// cannot read) is the zero value: no pin, no check.
func decodeCardJSON[T any](raw []byte) T {
	var v T
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &v)
	}
	return v
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (r reader) TaskClass(ctx context.Context, name string) (ledger.TaskClass, error) {
	row, err := r.q.TaskClassGetByName(ctx, name)
	if err != nil {
		return ledger.TaskClass{}, notFound(err, "task class", name)
	}
	return toTaskClass(row), nil
}

// TaskClasses returns every registered task class, by name.
func (r reader) TaskClasses(ctx context.Context) ([]ledger.TaskClass, error) {
	rows, err := r.q.TaskClassList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list task classes: %w", interpretError(err))
	}
	out := make([]ledger.TaskClass, len(rows))
	for i, row := range rows {
		out[i] = toTaskClass(row)
	}
	return out, nil
}

func (t *tx) PutTaskClass(ctx context.Context, c ledger.TaskClass) error {
	gate := make([]string, len(c.GateOn))
	for i, s := range c.GateOn {
		gate[i] = string(s)
	}
	err := t.q.TaskClassUpsert(ctx, dbsqlc.TaskClassUpsertParams{
		Name: c.Name, EffectCapable: c.EffectCapable, GateOn: gate,
		CompensationTimeoutMs: c.CompensationTimeout.Milliseconds(), UpdatedAt: c.UpdatedAt,
	})
	if err != nil {
		return fmt.Errorf("store task class %s: %w", c.Name, err)
	}
	return nil
}

func toOrg(r dbsqlc.RemoteOrg) ledger.Org {
	return ledger.Org{
		ID: r.ID, Name: r.Name, SharedCoordinator: r.SharedCoordinator, JWKS: r.Jwks, JWKSURL: deref(r.JwksUrl),
		JWKSFetch: ledger.JWKSFetch{
			Set: r.JwksFetched, FetchedAt: derefTime(r.JwksFetchedAt).UTC(),
			AttemptedAt: derefTime(r.JwksFetchAttemptedAt).UTC(), Error: deref(r.JwksFetchError),
		},
		AgentCardURL: deref(r.AgentCardUrl), AllowedHosts: r.AllowedHosts, RequireSignedReceipts: r.RequireSignedReceipts,
		RequireSignedCard: r.RequireSignedCard, CardJKUHosts: r.CardJkuHosts,
		CardPin: decodeCardJSON[ledger.CardPin](r.CardPin), CardCheck: decodeCardJSON[ledger.CardCheck](r.CardCheck),
		IdentityRevokedAt: derefTime(r.IdentityRevokedAt), IdentityRevokedReason: deref(r.IdentityRevokedReason),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

func toTaskClass(r dbsqlc.TaskClass) ledger.TaskClass {
	gate := make([]ledger.TaskStatus, len(r.GateOn))
	for i, s := range r.GateOn {
		gate[i] = ledger.TaskStatus(s)
	}
	return ledger.TaskClass{
		Name: r.Name, EffectCapable: r.EffectCapable, GateOn: gate,
		CompensationTimeout: time.Duration(r.CompensationTimeoutMs) * time.Millisecond, UpdatedAt: r.UpdatedAt,
	}
}

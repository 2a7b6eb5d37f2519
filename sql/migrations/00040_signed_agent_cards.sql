-- +goose Up

-- Signed agent cards (ledger/DESIGN.md §4.1). require_signed_card: the
-- org's card is used only when one of its signatures verifies.
-- card_jku_hosts: the hosts a card signature's jku may name for its key
-- to be fetched from (none: keys come from the org's registered keys
-- only). card_pin: the signing key (kid, thumbprint) and compensation
-- extension params pinned at the first verified use, or by an approved
-- org_card_accept change; NULL until then. card_check: what the last
-- check of the card found (status, key, params, reason, since).
ALTER TABLE remote_orgs
    ADD COLUMN require_signed_card boolean NOT NULL DEFAULT false,
    ADD COLUMN card_jku_hosts      text[]  NOT NULL DEFAULT '{}',
    ADD COLUMN card_pin            jsonb,
    ADD COLUMN card_check          jsonb;

ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check CHECK (kind IN (
    'principal_create', 'role_grant', 'org_update', 'task_class_update', 'write_off_threshold_update',
    'credential_create', 'oidc_link', 'task_class_policy_update', 'budget_tenants_update', 'no_identity_provider_account',
    'org_card_accept'));

-- +goose Down
ALTER TABLE pending_changes DROP CONSTRAINT pending_changes_kind_check;
ALTER TABLE pending_changes ADD CONSTRAINT pending_changes_kind_check CHECK (kind IN (
    'principal_create', 'role_grant', 'org_update', 'task_class_update', 'write_off_threshold_update',
    'credential_create', 'oidc_link', 'task_class_policy_update', 'budget_tenants_update', 'no_identity_provider_account')) NOT VALID;
ALTER TABLE remote_orgs
    DROP COLUMN card_check,
    DROP COLUMN card_pin,
    DROP COLUMN card_jku_hosts,
    DROP COLUMN require_signed_card;

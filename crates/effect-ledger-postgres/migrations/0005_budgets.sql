-- Version 5: budgets and their charges, locked and charged in the claim's
-- transaction.
--
-- Budgets (docs/approval.md#budgets): each budget's row (its window and
-- limits as its last charge declared them) is the lock a claim charged to
-- it takes (`SELECT ... FOR UPDATE`, after the operation's own row), so
-- the claims of one budget read its charges and add theirs one at a time.
-- One charge per operation and budget; a rejection deletes the operation's
-- charges. No foreign key: a pruned operation's charge still counts in
-- its window.

CREATE TABLE IF NOT EXISTS {schema}.effect_budgets (
    budget TEXT PRIMARY KEY,
    budget_window TEXT NOT NULL,
    max_count BIGINT,
    max_amount BIGINT
);
CREATE TABLE IF NOT EXISTS {schema}.effect_budget_charges (
    budget TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    amount BIGINT NOT NULL,
    charged_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (budget, operation_id)
);
CREATE INDEX IF NOT EXISTS idx_effect_budget_charges_time
    ON {schema}.effect_budget_charges (budget, charged_at);
CREATE INDEX IF NOT EXISTS idx_effect_budget_charges_operation
    ON {schema}.effect_budget_charges (operation_id);

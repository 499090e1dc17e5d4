"""Fixed labelled corpus for `tools/bench.py --section recall`.

A fictional software shop ("Lantern Labs"): services, repos, people, clients,
rules, infrastructure, vendors, decisions and open work, written the way an
agent would store them in a memory graph.  Everything here is invented.

QUESTIONS name the fact(s) that answer them as (entity, unique substring of the
fact); `questions()` resolves each to the exact stored fact text and fails
loudly if the substring is missing or ambiguous.  A question counts as recalled
when ANY of its expected facts appears in an answer (the alternatives say the
same thing in two places).

kind "paraphrase": the question is worded the way a person would ask it and its
key words do not appear in the fact (e.g. "which day of the week do we ship
releases?" for "deploys go out from the prod branch every Tuesday ...").
kind "keyword": the question shares its key words with the fact.
The questions were written from the point of view of a colleague asking, not
tuned to any retrieval algorithm.

THIS IS A TUNING SET. Recall's constants were looked at against it, so its figures are tuned
figures: the README reports them as such, beside LoCoMo's untouched report half. No word of its
paraphrase questions may appear in the server's SYNONYM_GROUPS (tests/test_recall.py checks), and
the word table is built from WordNet alone (tools/build_wordtable.py), never from these questions.

kind "typo": generated from each keyword question by `typo_questions()`: two adjacent letters in
the middle of its longest word swapped ("reindex" -> "reidnex"), the slip a hurried agent makes.
"""

ENTITIES = [
    # ---------------------------------------------------------------- services
    ("checkout-api", "service", [
        "Python 3.12 FastAPI service that owns cart, checkout and order creation",
        "owned by the payments squad; Ana Souza is the tech lead",
        "p95 latency budget is 250 ms for POST /orders",
        "talks to Stripe only through billing-engine, never directly",
        "2026-01-14: deployed 3.8.0 with idempotency keys on order creation",
        "2026-02-03: rolled back 3.9.0 after duplicate order emails; root cause was a retry loop in notification-worker",
        "runs 6 replicas in prod, autoscaling up to 20 when CPU stays above 70%",
        "health check endpoint is /healthz; readiness is /ready and waits for the Postgres pool",
        "rate limit: 300 requests per minute per API key, enforced at the gateway",
        "order totals are computed in integer cents; floats are banned in money code",
    ]),
    ("auth-service", "service", [
        "Go service issuing JWT access tokens with a 15 minute lifetime",
        "refresh tokens are valid for 30 days and are rotated on every use",
        "signing keys rotate every 90 days; the runbook is in docs-site under runbooks/auth-keys",
        "SSO for enterprise clients uses SAML through the Okta integration",
        "2025-11-20: migrated password hashing from bcrypt to argon2id; old hashes are upgraded at the next login",
        "login attempts are throttled to 5 per minute per IP, followed by a 15 minute lockout",
        "owned by Marcus Boyd's security team",
        "2026-02-17: deployed 2.4.0 adding passkey (WebAuthn) login behind the passkeys flag",
    ]),
    ("search-indexer", "service", [
        "consumes product-updated events from Kafka and writes them to the OpenSearch cluster",
        "a full reindex takes about 40 minutes and is started from the admin-portal, never during business hours",
        "uses the english analyzer plus a custom synonym file",
        "2026-01-08: index lag alert fired for 3 hours because a Kafka partition was stuck",
        "lag alert threshold is 5 minutes behind the topic head",
        "written in Kotlin; it is the only JVM service we run",
        "OpenSearch cluster has 3 data nodes and keeps one replica per shard",
    ]),
    ("notification-worker", "service", [
        "sends email through Postmark and SMS through Twilio",
        "retries failed sends with exponential backoff, at most 6 attempts",
        "2026-02-03: a bug in the retry loop sent duplicate order confirmation emails to about 1,800 customers",
        "email templates are stored in the design-system repo under emails/",
        "push notifications for the mobile app go through Firebase Cloud Messaging",
        "quiet hours: no marketing SMS between 21:00 and 08:00 in the recipient's timezone",
        "2026-02-06: deployed 1.9.2 with a dedupe key per message to stop double sends",
    ]),
    ("billing-engine", "service", [
        "wraps Stripe for charges, refunds and subscriptions",
        "invoices are generated on the 1st of each month at 02:00 UTC by a cron job",
        "refunds above 500 EUR need approval from finance in the admin-portal",
        "2025-12-02: moved to Stripe API version 2025-10 after the deprecation notice",
        "Stripe webhooks arrive through webhook-relay with signature checks",
        "currency support: EUR, GBP, USD and SEK",
        "owned by the payments squad together with checkout-api",
    ]),
    ("media-proxy", "service", [
        "resizes product images on the fly and caches them in the CDN for 30 days",
        "written in Rust using the image crate; replaced the old Node thumbnailer in 2025",
        "max upload size is 20 MB; larger files are rejected with 413",
        "2026-01-22: deployed 1.6.0 adding AVIF output for browsers that accept it",
        "runs on two EC2 instances outside Kubernetes because of its memory spikes",
    ]),
    ("admin-portal", "service", [
        "internal back-office app built with Next.js; only reachable over the VPN",
        "support agents use it to issue refunds, resend emails and impersonate customers",
        "impersonation sessions are logged and expire after 20 minutes",
        "2026-02-10: added a button to trigger a search reindex, with a confirmation dialog",
        "roles: viewer, agent, supervisor, admin; admin requires hardware key 2FA",
        "audit log of every admin action is shipped to Datadog and kept 1 year",
    ]),
    ("mobile-gateway", "service", [
        "backend-for-frontend for the iOS and Android apps, written in TypeScript",
        "aggregates checkout-api, search and profile calls into one response per screen",
        "minimum supported app version is 4.2; older versions get a forced-upgrade screen",
        "2026-02-24: deployed 1.12.0 with response compression, cutting payload size by about 60%",
        "owned by Kenji Watanabe's mobile squad",
    ]),
    ("report-builder", "service", [
        "generates the weekly sales CSV for each client and emails it every Monday at 07:00 CET",
        "reads from the analytics replica, never from the postgres-main primary",
        "2026-01-30: PDF export added at the request of Harbor Health",
        "heavy reports are queued; a single report is capped at 10 minutes of runtime",
        "written in Python with pandas; runs as a worker pool of 3 pods",
    ]),
    ("feature-flags", "service", [
        "self-hosted Unleash instance; flags are named team.feature, e.g. mobile.new-onboarding",
        "flags older than 90 days must be removed or made permanent at the monthly cleanup",
        "kill switches for checkout and payments are flags with the prefix kill.",
        "2026-02-17: passkeys flag enabled for 10% of users",
        "SDKs cache flag values for 15 seconds, so a change takes up to 15 seconds to apply",
    ]),
    ("webhook-relay", "service", [
        "receives webhooks from Stripe, Shopify and carriers, verifies signatures and puts them on Kafka",
        "keeps raw payloads for 14 days in S3 so they can be replayed",
        "2025-12-15: outage of 47 minutes when its TLS certificate expired; certificates are now renewed by cert-manager",
        "written in Go; stateless, 3 replicas behind the public load balancer",
    ]),
    ("inventory-sync", "service", [
        "pulls stock levels from client ERPs every 15 minutes",
        "Kestrel Logistics pushes stock via SFTP CSV drops instead of the API",
        "when an ERP is unreachable for more than an hour it marks the client's stock as stale and posts in #ops-alerts",
        "written in Python; runs as a Kubernetes CronJob",
        "2026-01-12: added retry with jitter after Northwind's ERP rate-limited us",
    ]),
    # ---------------------------------------------------------------- repos
    ("shop-web", "repo", [
        "Next.js storefront used by all clients, themed per client",
        "main branch is protected; merges need one approval and green CI",
        "end-to-end tests run with Playwright on every pull request and take about 12 minutes",
        "client themes live in themes/<client>/ and are owned by Sofia Rossi",
        "2026-02-12: upgraded to Next.js 15 and React 19",
        "product pages are statically generated and revalidated every 10 minutes",
    ]),
    ("infra-terraform", "repo", [
        "all cloud infrastructure as code; AWS eu-west-1 is the primary region",
        "changes are applied through Atlantis on the pull request, never from laptops",
        "state is stored in an S3 bucket with DynamoDB locking",
        "2026-01-19: added eu-central-1 as a warm standby for disaster recovery",
        "modules are versioned with git tags and pinned in each environment",
    ]),
    ("mobile-app", "repo", [
        "React Native app for iOS and Android, white-labelled per client",
        "release builds are made by Bitrise and submitted to the stores on Thursdays",
        "crash reports go to Sentry; the crash-free sessions target is 99.5%",
        "2026-02-20: version 4.6 submitted with the new onboarding flow",
        "each client build has its own bundle id and signing profile",
    ]),
    ("data-pipelines", "repo", [
        "Airflow DAGs that load Postgres replicas and Stripe exports into BigQuery every night at 01:00 UTC",
        "failures page the data on-call only on weekdays",
        "dbt models live in data-pipelines/dbt; tests run in CI with a sample dataset",
        "2026-02-11: nightly load failed twice because a Stripe export schema changed",
    ]),
    ("design-system", "repo", [
        "shared React component library published to the private npm registry as @lantern/ui",
        "Storybook is deployed to design.lantern.internal on every merge",
        "email templates in emails/ are written in MJML",
        "2026-01-25: released 5.0.0 with the new colour tokens; breaking change for themes",
    ]),
    ("docs-site", "repo", [
        "internal docs built with MkDocs; runbooks live under runbooks/",
        "every service must have a runbook page with dashboards, alerts and rollback steps",
        "deployed automatically to docs.lantern.internal on merge to main",
        "architecture decision records live under adr/ and are numbered",
    ]),
    # ---------------------------------------------------------------- people
    ("Priya Raman", "person", [
        "engineering manager for the platform and payments squads",
        "prefers written proposals (one-page RFCs) before any meeting about architecture",
        "out on parental leave from 2026-04-01 to 2026-07-31; Tomas covers her 1:1s",
        "runs the weekly planning meeting on Mondays at 10:00",
        "approves all hiring decisions for backend roles",
        "joined Lantern Labs in 2021 from a bank's payments team",
    ]),
    ("Tomas Ek", "person", [
        "SRE lead; owns Kubernetes, Terraform and the on-call rotation",
        "based in Stockholm (CET)",
        "wants every alert to link a runbook; alerts without one get deleted after 30 days",
        "2026-01-19: led the disaster recovery drill that failed over to eu-central-1 in 38 minutes",
        "prefers to be reached in #sre rather than by direct message",
    ]),
    ("Ana Souza", "person", [
        "tech lead of the payments squad; owns checkout-api and billing-engine",
        "based in Lisbon",
        "expert on the Stripe integration; ask her before touching refund logic",
        "2026-02-03: wrote the postmortem for the duplicate email incident",
        "mentors Diego Alvarez",
    ]),
    ("Kenji Watanabe", "person", [
        "mobile lead; owns mobile-app and mobile-gateway",
        "works from Osaka, overlapping with Europe only in the morning CET",
        "pushes for monthly rather than weekly app store releases",
        "2026-02-20: submitted app version 4.6 to both stores",
    ]),
    ("Lena Fischer", "person", [
        "product manager for search and catalogue",
        "maintains the search synonym list together with client merchandisers",
        "her Q1 2026 goal is raising search click-through by 10%",
        "writes the monthly product update email to clients",
    ]),
    ("Marcus Boyd", "person", [
        "security engineer; runs the quarterly access review",
        "must be told within 1 hour about any suspected data breach",
        "owns auth-service and the secrets management setup in Vault",
        "2026-01-15: finished the yearly penetration test with an external firm; 2 medium findings",
    ]),
    ("Grace Okafor", "person", [
        "data engineer; owns data-pipelines and the BigQuery warehouse",
        "builds the monthly KPI dashboard in Looker for Omar",
        "on the data on-call rotation with one contractor",
    ]),
    ("Diego Alvarez", "person", [
        "frontend developer on shop-web; the go-to person for Playwright tests",
        "joined 2025-09-01",
        "is rewriting the checkout page with React Server Components",
    ]),
    ("Hannah Cole", "person", [
        "leads customer support; escalates via the #support-escalations channel",
        "support hours are 08:00-18:00 CET on weekdays",
        "team of 5 agents; one agent is always on the phone line",
    ]),
    ("Omar Haddad", "person", [
        "CTO; final say on vendor contracts and architecture decisions",
        "wants cloud spend kept under 38k EUR per month",
        "reviews every engineering blog post before it is published",
    ]),
    ("Sofia Rossi", "person", [
        "product designer; owns the design-system and the client themes",
        "the Figma library is the source of truth for colours and spacing tokens",
        "runs a design critique every other Wednesday",
    ]),
    ("Ben Carter", "person", [
        "QA engineer; runs the manual regression checklist before each mobile release",
        "keeps the test accounts for every client in 1Password, vault QA-shared",
        "2026-02-19: found the onboarding crash on Android 10 before release",
    ]),
    # ---------------------------------------------------------------- clients
    ("Northwind Grocers", "client", [
        "largest client by revenue, about 31% of GMV",
        "contract renews on 2026-09-30; Omar handles the renewal",
        "needs same-day delivery slots shown at checkout",
        "storefront domain is shop.northwind-grocers.example",
        "2026-01-27: complained about slow search on mobile; traced to a missing synonym for courgette",
        "SLA: 99.9% monthly uptime for storefront and checkout, with service credits",
    ]),
    ("Bluefin Travel", "client", [
        "sells travel insurance add-ons through our checkout",
        "requires all customer data to stay in the EU",
        "main contact is their CTO, Ines Moreau",
        "2026-02-05: asked for Apple Pay support; planned for Q2",
    ]),
    ("Harbor Health", "client", [
        "pharmacy client; prescriptions are never stored by us, only order references",
        "requires a signed DPA and a yearly penetration test report",
        "asked for PDF exports of the weekly sales report (delivered 2026-01-30)",
        "orders need age verification for some products before shipping",
    ]),
    ("Kestrel Logistics", "client", [
        "B2B client; customers order pallets, not single items",
        "pushes stock via SFTP CSV drops every 30 minutes",
        "invoices are paid by bank transfer with 60-day terms, no card payments",
        "uses our API directly from their own ordering portal",
    ]),
    ("Maple Credit Union", "client", [
        "pilot client since 2026-01; uses the storefront for member merchandise only",
        "all staff logins must go through their Azure AD via SAML",
        "pilot review meeting planned for 2026-04-15",
    ]),
    ("Orchid Fashion", "client", [
        "fashion client with heavy seasonal peaks",
        "Black Friday 2025 peaked at 4,200 orders per minute",
        "returns are handled by their own warehouse system; we only store the return label",
        "product catalogue of about 60,000 SKUs, refreshed nightly",
    ]),
    # ---------------------------------------------------------------- rules
    ("release process", "rule", [
        "deploys go out from the prod branch every Tuesday and Thursday after 10:00 CET",
        "no deploys on Fridays or on the day before a public holiday",
        "every release needs a changelog entry and a version tag following semver",
        "hotfixes may go out any day with approval from the on-call SRE",
        "canary: 5% of traffic for 30 minutes before full rollout",
    ]),
    ("on-call policy", "rule", [
        "one primary and one secondary on-call per week, handover on Monday at 10:00",
        "the primary must acknowledge a page within 5 minutes",
        "on-call engineers get a compensation day for every weekend shift",
        "PagerDuty escalates to the secondary after 15 minutes without acknowledgement",
    ]),
    ("code review policy", "rule", [
        "every pull request needs at least one approval; changes to auth or payments need two",
        "reviews should be done within one working day",
        "no self-merging except for docs-only changes",
    ]),
    ("incident process", "rule", [
        "SEV1 = customer-facing outage or data loss; SEV2 = degraded service; SEV3 = internal only",
        "every SEV1 and SEV2 gets a blameless postmortem within 5 working days",
        "the status page is updated every 30 minutes during a SEV1",
        "the incident commander is the primary on-call unless they hand it over explicitly",
    ]),
    ("data retention policy", "rule", [
        "order data is kept 7 years for tax reasons; access logs are kept 90 days",
        "customer accounts inactive for 3 years are anonymised",
        "backups of postgres-main are kept 35 days",
    ]),
    ("security policy", "rule", [
        "secrets live in Vault; never in env files committed to git",
        "laptops must use full-disk encryption and auto-lock after 5 minutes",
        "dependencies with critical CVEs must be patched within 7 days",
        "production database access requires a Teleport session with a ticket number",
    ]),
    ("coding conventions", "rule", [
        "Python code is formatted with ruff and type-checked with mypy --strict",
        "TypeScript uses strict mode; no any without a comment explaining why",
        "commit messages follow Conventional Commits (feat:, fix:, chore:)",
        "feature branches are named <ticket>-short-description",
    ]),
    # ---------------------------------------------------------------- infrastructure
    ("postgres-main", "infrastructure", [
        "PostgreSQL 16 primary on RDS (db.r6g.2xlarge) with two read replicas",
        "2025-10-18: upgraded from Postgres 14 to 16 during a 20-minute maintenance window",
        "connection pooling through PgBouncer in transaction mode, max 400 client connections",
        "nightly logical backups at 03:00 UTC plus point-in-time recovery",
        "the analytics replica lags up to 5 minutes and is used by report-builder and data-pipelines",
    ]),
    ("redis-cache", "infrastructure", [
        "ElastiCache Redis 7 used for sessions, carts and rate limiting",
        "carts expire after 14 days of inactivity",
        "eviction policy is allkeys-lru; memory alarm at 80%",
    ]),
    ("kafka-cluster", "infrastructure", [
        "MSK cluster with 3 brokers; topics use 12 partitions by default",
        "retention is 7 days on event topics and 30 days on the orders topic",
        "2026-01-08: partition 7 of product-updated got stuck after a broker restart",
    ]),
    ("eks-prod", "infrastructure", [
        "EKS 1.29 cluster in eu-west-1 running every service except media-proxy",
        "node groups: general (m6i.xlarge) and memory (r6i.2xlarge)",
        "upgrade to EKS 1.30 scheduled for 2026-03-10",
    ]),
    ("cloudfront-cdn", "infrastructure", [
        "CloudFront in front of shop-web and media-proxy",
        "cache invalidation for a client theme takes about 5 minutes",
    ]),
    ("staging environment", "infrastructure", [
        "staging mirrors prod at smaller scale; reset with anonymised data every Sunday night",
        "URL pattern is <client>.staging.lantern.example",
        "deploys to staging happen automatically on every merge to main",
    ]),
    # ---------------------------------------------------------------- vendors and tools
    ("Sentry", "tool", [
        "error tracking for all services and the mobile app; alerts route to each squad's Slack channel",
        "plan allows 5 million events per month; we used 3.1 million in January 2026",
    ]),
    ("Datadog", "tool", [
        "metrics, APM and logs; log retention is 15 days",
        "dashboards per service are linked from each runbook",
        "2026-02-01: contract renewed for one year at 2,900 EUR per month",
    ]),
    ("GitHub Actions", "tool", [
        "CI for all repos; self-hosted runners on EKS for the heavy jobs",
        "the shop-web pipeline takes about 18 minutes including Playwright",
    ]),
    ("Stripe", "tool", [
        "payment provider for all clients except Kestrel Logistics",
        "test mode credentials are in Vault under stripe/test; live ones only in prod",
    ]),
    ("PagerDuty", "tool", [
        "pages the on-call; schedules are synced from the on-call rotation",
        "each service has its own escalation policy named after the squad",
    ]),
    # ---------------------------------------------------------------- decisions
    ("ADR-012 Postgres 16", "decision", [
        "2025-09-12: decided to upgrade postgres-main to PostgreSQL 16 for logical replication improvements",
        "alternative considered: Aurora; rejected because of cost at our size",
    ]),
    ("ADR-014 keep Kotlin indexer", "decision", [
        "keep search-indexer on Kotlin rather than rewriting it in Go; not worth the risk before Black Friday",
        "revisit after the 2026 peak season",
    ]),
    ("ADR-017 self-hosted flags", "decision", [
        "self-host Unleash instead of paying for LaunchDarkly; saves about 1,100 EUR per month",
        "decided 2025-06-04 by Omar and Tomas",
    ]),
    ("ADR-019 monorepo", "decision", [
        "monorepo proposal rejected; repos stay split per deployable",
        "main reason: CI times and ownership boundaries",
    ]),
    ("ADR-021 tracing", "decision", [
        "all new services emit traces with OpenTelemetry, exported to Datadog",
        "existing services adopt it when they are next touched",
    ]),
    # ---------------------------------------------------------------- pending work
    ("Apple Pay for Bluefin", "pending", [
        "Bluefin Travel wants Apple Pay at checkout, promised for Q2 2026",
        "needs a domain verification file on their storefront",
        "owner: Ana Souza; estimate 3 weeks",
    ]),
    ("EKS 1.30 upgrade", "pending", [
        "scheduled for 2026-03-10; Tomas owns it",
        "blocked on the ingress-nginx chart upgrade",
    ]),
    ("flag cleanup", "pending", [
        "23 flags older than 90 days found in the February review",
        "each squad removes its own stale flags before 2026-03-31",
    ]),
    ("mobile search latency", "pending", [
        "Northwind search on mobile has p95 of 1.8 s; the target is 600 ms",
        "suspected cause: mobile-gateway calls search twice per screen",
    ]),
    # ---------------------------------------------------------------- teams and company
    ("payments squad", "team", [
        "members: Ana Souza, Diego Alvarez and one contractor",
        "Slack channel #squad-payments; standup at 09:30 CET",
    ]),
    ("platform team", "team", [
        "Tomas Ek, Marcus Boyd and two SREs; owns infra-terraform and eks-prod",
        "runs office hours on Wednesdays at 14:00 for questions about infrastructure",
    ]),
    ("Lantern Labs", "company", [
        "38 people, 21 of them in engineering",
        "all-hands on the first Thursday of the month at 16:00 CET",
        "fiscal year runs January to December",
        "offices in Lisbon and Stockholm; everyone else is remote",
    ]),
]

# More facts of the same entities: the ordinary history and detail a real graph
# accumulates (deploy logs, owners, numbers).  They are also the distractors.
_MORE = {
    "checkout-api": [
        "2025-11-28: scaled to 20 replicas for Black Friday; no errors at peak",
    ],
    "auth-service": [
        "2026-01-09: deployed 2.3.1 fixing a clock-skew bug in token validation",
        "exposes /.well-known/jwks.json for other services to verify tokens",
    ],
    "search-indexer": [
        "2026-02-10: deployed 2.2.0 with faster bulk writes (batches of 500 documents)",
        "product documents carry price, stock flag and client id",
    ],
    "notification-worker": [
        "unsubscribe links are handled by Postmark's suppression list",
        "runs 4 replicas, one Kafka consumer each",
    ],
    "billing-engine": [
        "2026-01-05: deployed 4.1.0 with proration for mid-month plan changes",
        "failed card payments are retried on days 1, 3 and 7 before the subscription lapses",
        "VAT is calculated per client country using the Stripe Tax API",
    ],
    "media-proxy": [
        "cache hit rate is about 94% at the CDN",
        "2026-02-14: memory spike to 7 GB while resizing a 19 MB panorama; added a pixel limit",
    ],
    "admin-portal": [
        "2026-01-18: deployed 7.3.0 with bulk order export",
        "login goes through Okta with the staff SSO app",
    ],
    "mobile-gateway": [
        "2026-01-16: deployed 1.11.2 with a fix for the Android cart badge count",
        "caches home-screen content for 60 seconds per client",
    ],
    "report-builder": [
        "2026-02-16: deployed 2.7.1 fixing a timezone bug in weekly totals",
        "reports older than 13 months are deleted from the download area",
    ],
    "feature-flags": [
        "2026-02-02: upgraded Unleash to 6.3",
        "flag changes in prod are announced in #releases",
    ],
    "webhook-relay": [
        "2026-02-08: deployed 1.4.0 adding DHL and UPS tracking webhooks",
        "rejected webhooks (bad signature) are counted on the Datadog dashboard",
    ],
    "inventory-sync": [
        "owned by the platform team because it touches every client ERP",
        "stock changes above 50% in one run are held for a manual check",
    ],
    "shop-web": [
        "2026-01-21: fixed cumulative layout shift on product pages, LCP now 1.9 s",
        "translations are managed in Crowdin; 9 languages",
        "2026-02-26: added same-day delivery slot picker for Northwind",
        "bundle size budget is 180 kB of JavaScript per page",
    ],
    "infra-terraform": [
        "2026-02-04: moved the VPN to AWS Client VPN",
        "cost allocation tags are required on every resource: team, service, env",
    ],
    "mobile-app": [
        "2026-01-29: version 4.5.2 hotfix for the Android 10 login crash",
        "deep links use the scheme lantern-<client>://",
        "minimum iOS version is 15, minimum Android API level is 26",
    ],
    "data-pipelines": [
        "Grace Okafor owns it",
        "BigQuery costs about 600 EUR per month, mostly from the Looker dashboards",
        "personal data is pseudonymised before it lands in BigQuery",
    ],
    "design-system": [
        "components follow WCAG 2.2 AA; contrast is checked in CI",
        "2026-02-18: released 5.1.0 with a new date picker",
    ],
    "docs-site": [
        "onboarding guide for new engineers is at docs/onboarding and takes about a week",
        "every page shows its owner and last review date",
    ],
    "Priya Raman": [
        "2026-02-09: agreed to hire two backend engineers in Q2",
        "does 1:1s every two weeks with each engineer",
    ],
    "Tomas Ek": [
        "2026-02-23: started the EKS 1.30 upgrade plan",
        "keeps the cloud cost report and sends it to Omar monthly",
    ],
    "Ana Souza": [
        "2026-01-14: shipped idempotency keys in checkout-api 3.8.0",
        "is on the on-call rotation for payments",
        "prefers pairing sessions in the morning",
    ],
    "Kenji Watanabe": [
        "2026-01-29: shipped the 4.5.2 hotfix for Android login",
        "wants to move the mobile-app to the new React Native architecture this year",
    ],
    "Lena Fischer": [
        "2026-02-13: ran the search relevance review with Northwind's merchandisers",
        "based in Berlin, works Monday to Thursday",
    ],
    "Marcus Boyd": [
        "2026-02-26: rotated the Vault root token and recorded it in the security log",
        "runs phishing training for new joiners",
    ],
    "Grace Okafor": [
        "2026-02-11: fixed the Stripe export schema change in data-pipelines",
        "based in London",
        "asked for read access to the Orchid Fashion returns feed",
    ],
    "Diego Alvarez": [
        "2026-02-12: upgraded shop-web to Next.js 15",
        "owns the storefront accessibility fixes",
        "based in Madrid",
    ],
    "Hannah Cole": [
        "support tickets are handled in Zendesk; target first reply within 4 hours",
        "sends a weekly summary of top support issues to Priya",
        "2026-02-04: asked for a resend-invoice button in admin-portal",
    ],
    "Omar Haddad": [
        "2026-01-06: approved the disaster recovery standby in eu-central-1",
        "meets every client's CTO once a quarter",
    ],
    "Sofia Rossi": [
        "2026-01-25: published colour tokens v5 in the Figma library",
        "works from Milan",
    ],
    "Ben Carter": [
        "maintains the Playwright smoke suite that runs after every deploy",
        "regression checklist has 140 steps and takes a day",
    ],
    "Northwind Grocers": [
        "about 1.2 million monthly active customers",
        "their ERP is SAP and rate-limits us to 10 requests per second",
        "2026-02-26: same-day delivery slot picker went live",
    ],
    "Bluefin Travel": [
        "storefront in 4 languages: English, French, German, Spanish",
        "contract started 2024-05-01, renews yearly in May",
        "2026-01-20: reported a failed insurance add-on price on the Spanish site",
    ],
    "Harbor Health": [
        "main contact is their head of e-commerce, Paul Nguyen",
        "2026-01-15: received our yearly penetration test summary",
        "storefront must meet WCAG 2.2 AA because of their public funding",
    ],
    "Kestrel Logistics": [
        "main contact is their operations director, Mia Laine",
        "about 400 orders per day, mostly on weekday mornings",
        "2026-02-09: asked for a bulk order upload by spreadsheet",
    ],
    "Maple Credit Union": [
        "smallest client; fixed monthly fee, no revenue share",
        "main contact is their marketing lead, Sam Whitfield",
    ],
    "Orchid Fashion": [
        "main contact is their head of digital, Chloe Martin",
        "2026-02-14: Valentine's Day campaign ran at 900 orders per minute without incidents",
        "uses the storefront in 6 countries",
        "size guides are served as static pages from their CMS",
    ],
    "release process": [
        "release notes are posted in #releases by the person deploying",
        "database migrations must be backwards compatible with the previous release",
        "the release train is cancelled if any SEV1 is open",
    ],
    "on-call policy": [
        "the on-call laptop must have VPN and Teleport set up before the shift starts",
        "rotation covers the platform, payments and mobile squads; data has its own rotation",
    ],
    "code review policy": [
        "reviewers check tests, migrations and feature flags, not formatting",
        "pull requests over 400 changed lines should be split",
    ],
    "incident process": [
        "incident channels are named #inc-<date>-<short-name>",
        "customers are told about SEV1 incidents by support, not engineering",
    ],
    "data retention policy": [
        "support tickets are deleted after 2 years",
        "Kafka orders topic keeps 30 days, which is enough to rebuild projections",
        "deletion requests (GDPR Article 17) are handled within 30 days",
    ],
    "security policy": [
        "all staff use hardware security keys for SSO",
        "third-party scripts on storefronts need a security review",
        "access is reviewed every quarter and unused accounts are removed",
    ],
    "coding conventions": [
        "Go code uses golangci-lint with the shared config in the platform repo",
        "database migrations are written with Alembic in Python services",
        "log lines are JSON with trace_id, service and client fields",
    ],
    "postgres-main": [
        "largest table is order_items with about 480 million rows",
        "2026-02-21: vacuum on order_items took 3 hours; autovacuum settings tuned",
        "storage is 2.1 TB and grows about 60 GB per month",
    ],
    "redis-cache": [
        "2026-01-31: failover to the replica took 40 seconds; carts survived",
        "cluster mode disabled; one primary and one replica",
    ],
    "kafka-cluster": [
        "topics are created through Terraform only",
        "consumer lag is monitored per group in Datadog",
        "schemas are stored in the Glue schema registry as Avro",
    ],
    "eks-prod": [
        "2026-02-15: node group general scaled from 8 to 12 nodes",
        "ingress through ingress-nginx behind an AWS network load balancer",
        "cluster autoscaler allows up to 30 nodes",
    ],
    "cloudfront-cdn": [
        "2026-01-11: enabled HTTP/3",
        "costs about 1,400 EUR per month, mostly image traffic",
        "WAF rules block known bad bots and rate-limit login pages",
    ],
    "staging environment": [
        "Stripe is in test mode on staging",
        "2026-02-07: staging database ran out of disk during the Sunday reset",
    ],
    "Sentry": [
        "release health is tracked per app version",
        "2026-02-19: Android 10 onboarding crash showed up in Sentry before release",
    ],
    "Datadog": [
        "APM traces are sampled at 20% in prod",
        "synthetic checks hit every storefront every minute from 3 regions",
    ],
    "GitHub Actions": [
        "about 9,000 CI minutes per month on hosted runners",
        "2026-02-03: cached Docker layers cut the checkout-api build from 9 to 4 minutes",
        "required checks: lint, unit tests, build; e2e is required only on shop-web",
    ],
    "Stripe": [
        "we pay 1.4% plus 0.25 EUR per European card transaction",
        "Radar fraud rules are managed by Ana Souza",
    ],
    "PagerDuty": [
        "2026-02-03: the duplicate email incident paged the payments on-call at 02:14",
        "low-urgency alerts go to Slack only, never to phones",
    ],
    "ADR-012 Postgres 16": [
        "owner: Tomas Ek; approved by Omar",
    ],
    "ADR-014 keep Kotlin indexer": [
        "written by Lena Fischer and Tomas Ek in 2025-08",
    ],
    "ADR-019 monorepo": [
        "decided 2025-10-02 after a two-week trial on the design-system and shop-web",
    ],
    "ADR-021 tracing": [
        "decided 2025-11-10; proposed by Tomas Ek",
        "trace sampling is 20% in prod and 100% in staging",
    ],
    "Apple Pay for Bluefin": [
        "blocked until Stripe payment request button is upgraded in checkout",
    ],
    "EKS 1.30 upgrade": [
        "needs a staging dry run at least one week before",
        "rollback plan: keep the old node group for 48 hours",
    ],
    "flag cleanup": [
        "owner: Priya Raman to chase squads at the weekly planning meeting",
    ],
    "mobile search latency": [
        "owner: Kenji Watanabe with Lena Fischer",
        "2026-02-24: response compression in mobile-gateway 1.12.0 saved 300 ms",
    ],
    "payments squad": [
        "owns checkout-api, billing-engine and the Stripe account",
        "quarterly goal: cut checkout errors by half",
    ],
    "platform team": [
        "2026-02-05: published the Q1 infrastructure roadmap",
        "handles access requests for AWS and Teleport",
    ],
    "Lantern Labs": [
        "founded in 2017; builds white-label storefronts for retailers",
        "engineering blog at lantern.example/blog",
        "company holidays follow the Portuguese calendar for scheduling deploys",
    ],
}

ENTITIES = [(n, t, f + _MORE.get(n, [])) for n, t, f in ENTITIES]

RELATIONS = [
    ("checkout-api", "billing-engine", "calls"),
    ("checkout-api", "postgres-main", "stores data in"),
    ("checkout-api", "redis-cache", "keeps carts in"),
    ("billing-engine", "Stripe", "charges through"),
    ("webhook-relay", "kafka-cluster", "publishes to"),
    ("search-indexer", "kafka-cluster", "consumes from"),
    ("notification-worker", "kafka-cluster", "consumes from"),
    ("mobile-gateway", "checkout-api", "calls"),
    ("report-builder", "postgres-main", "reads replica of"),
    ("data-pipelines", "postgres-main", "reads replica of"),
    ("shop-web", "checkout-api", "calls"),
    ("shop-web", "cloudfront-cdn", "served by"),
    ("media-proxy", "cloudfront-cdn", "served by"),
    ("admin-portal", "billing-engine", "issues refunds through"),
    ("admin-portal", "search-indexer", "triggers reindex of"),
    ("Ana Souza", "checkout-api", "owns"),
    ("Ana Souza", "billing-engine", "owns"),
    ("Ana Souza", "payments squad", "leads"),
    ("Diego Alvarez", "payments squad", "member of"),
    ("Tomas Ek", "platform team", "leads"),
    ("Marcus Boyd", "platform team", "member of"),
    ("Marcus Boyd", "auth-service", "owns"),
    ("Kenji Watanabe", "mobile-app", "owns"),
    ("Kenji Watanabe", "mobile-gateway", "owns"),
    ("Grace Okafor", "data-pipelines", "owns"),
    ("Sofia Rossi", "design-system", "owns"),
    ("Lena Fischer", "search-indexer", "product owner of"),
    ("Priya Raman", "payments squad", "manages"),
    ("Priya Raman", "platform team", "manages"),
    ("Omar Haddad", "Priya Raman", "manages"),
    ("Hannah Cole", "admin-portal", "uses"),
    ("Ben Carter", "mobile-app", "tests"),
    ("Northwind Grocers", "shop-web", "uses"),
    ("Bluefin Travel", "shop-web", "uses"),
    ("Harbor Health", "report-builder", "receives reports from"),
    ("Kestrel Logistics", "inventory-sync", "sends stock to"),
    ("Maple Credit Union", "auth-service", "logs in through"),
    ("Orchid Fashion", "shop-web", "uses"),
    ("Apple Pay for Bluefin", "Bluefin Travel", "requested by"),
    ("Apple Pay for Bluefin", "checkout-api", "changes"),
    ("EKS 1.30 upgrade", "eks-prod", "upgrades"),
    ("flag cleanup", "feature-flags", "cleans up"),
    ("mobile search latency", "mobile-gateway", "affects"),
    ("mobile search latency", "Northwind Grocers", "reported by"),
    ("ADR-012 Postgres 16", "postgres-main", "decides on"),
    ("ADR-014 keep Kotlin indexer", "search-indexer", "decides on"),
    ("ADR-017 self-hosted flags", "feature-flags", "decides on"),
    ("ADR-021 tracing", "Datadog", "exports to"),
    ("infra-terraform", "eks-prod", "provisions"),
    ("infra-terraform", "postgres-main", "provisions"),
    ("eks-prod", "checkout-api", "runs"),
    ("PagerDuty", "on-call policy", "implements"),
    ("release process", "shop-web", "applies to"),
    ("incident process", "on-call policy", "relies on"),
    ("docs-site", "incident process", "documents"),
    ("mobile-app", "Sentry", "reports crashes to"),
    ("GitHub Actions", "shop-web", "builds"),
]

# (question, [(entity, unique substring of the expected fact), ...], kind)
_Q = [
    # ---- paraphrases: key words of the question are not in the fact
    ("which day of the week do we ship releases?",
     [("release process", "every Tuesday and Thursday")], "paraphrase"),
    ("can I roll out a change right before the weekend?",
     [("release process", "no deploys on Fridays")], "paraphrase"),
    ("who should I ask before changing how we give customers their money back?",
     [("Ana Souza", "before touching refund logic")], "paraphrase"),
    ("what's the ceiling on our hosting bill?",
     [("Omar Haddad", "cloud spend kept under")], "paraphrase"),
    ("which city does the SRE lead work from?",
     [("Tomas Ek", "based in Stockholm")], "paraphrase"),
    ("I'm on call and my phone just went off, how quickly must I react?",
     [("on-call policy", "acknowledge a page within")], "paraphrase"),
    ("is there time off in lieu for people covering Saturdays?",
     [("on-call policy", "compensation day")], "paraphrase"),
    ("how long do we hold on to old purchase records?",
     [("data retention policy", "order data is kept 7 years")], "paraphrase"),
    ("what happens to dormant users' personal details?",
     [("data retention policy", "inactive for 3 years")], "paraphrase"),
    ("how soon do we have to fix a badly vulnerable library?",
     [("security policy", "critical CVEs")], "paraphrase"),
    ("where do passwords and API keys go?",
     [("security policy", "secrets live in Vault")], "paraphrase"),
    ("what do I need to run a query against live customer data?",
     [("security policy", "Teleport session")], "paraphrase"),
    ("how long can a support agent act as a customer?",
     [("admin-portal", "impersonation sessions are logged")], "paraphrase"),
    ("which shopper brand is our biggest earner?",
     [("Northwind Grocers", "largest client by revenue")], "paraphrase"),
    ("when is the grocery chain's agreement up?",
     [("Northwind Grocers", "contract renews on")], "paraphrase"),
    ("are we allowed to host the travel firm's shopper records in the US?",
     [("Bluefin Travel", "stay in the EU")], "paraphrase"),
    ("what was the fashion brand's record traffic during the November sale?",
     [("Orchid Fashion", "4,200 orders per minute")], "paraphrase"),
    ("how long does a shopping basket survive if nobody touches it?",
     [("redis-cache", "carts expire after 14 days")], "paraphrase"),
    ("how far behind is the reporting copy of the database?",
     [("postgres-main", "analytics replica lags")], "paraphrase"),
    ("how long did the last switch to the standby region take?",
     [("Tomas Ek", "failed over to eu-central-1")], "paraphrase"),
    ("what's the largest photo a merchant can send us?",
     [("media-proxy", "max upload size")], "paraphrase"),
    ("when are customers' bills produced?",
     [("billing-engine", "invoices are generated on the 1st")], "paraphrase"),
    ("who signs off on giving back large sums of money?",
     [("billing-engine", "refunds above 500 EUR")], "paraphrase"),
    ("what do users on an outdated build of the iPhone client see?",
     [("mobile-gateway", "forced-upgrade screen")], "paraphrase"),
    ("when can customers reach a human for help?",
     [("Hannah Cole", "support hours are")], "paraphrase"),
    ("should we put all the code into a single repository?",
     [("ADR-019 monorepo", "monorepo proposal rejected")], "paraphrase"),
    ("I think someone stole our user records, who do I alert first?",
     [("Marcus Boyd", "suspected data breach")], "paraphrase"),
    ("how much does our monitoring vendor cost us?",
     [("Datadog", "contract renewed for one year")], "paraphrase"),
    ("when do we have to stop sending promotional texts?",
     [("notification-worker", "quiet hours")], "paraphrase"),
    ("when is the company-wide get-together?",
     [("Lantern Labs", "all-hands on the first Thursday")], "paraphrase"),
    ("how do inventory numbers from the pallet customer reach us?",
     [("inventory-sync", "Kestrel Logistics pushes stock"),
      ("Kestrel Logistics", "pushes stock via SFTP")], "paraphrase"),
    ("who hires people for the server-side team?",
     [("Priya Raman", "approves all hiring decisions")], "paraphrase"),
    # ---- keyword questions: they share their key words with the fact
    ("how long do access tokens last?",
     [("auth-service", "JWT access tokens with a 15 minute lifetime")], "keyword"),
    ("how long are refresh tokens valid?",
     [("auth-service", "refresh tokens are valid for 30 days")], "keyword"),
    ("when did we migrate password hashing to argon2id?",
     [("auth-service", "migrated password hashing")], "keyword"),
    ("how often do the auth signing keys rotate?",
     [("auth-service", "signing keys rotate every 90 days")], "keyword"),
    ("what is the p95 latency budget for POST /orders?",
     [("checkout-api", "p95 latency budget")], "keyword"),
    ("why was checkout-api 3.9.0 rolled back?",
     [("checkout-api", "rolled back 3.9.0")], "keyword"),
    ("why did customers get two order confirmation emails?",
     [("notification-worker", "duplicate order confirmation emails"),
      ("checkout-api", "rolled back 3.9.0")], "keyword"),
    ("who wrote the postmortem for the duplicate email incident?",
     [("Ana Souza", "wrote the postmortem")], "keyword"),
    ("how long does a full search reindex take?",
     [("search-indexer", "full reindex takes about 40 minutes")], "keyword"),
    ("what is the search index lag alert threshold?",
     [("search-indexer", "lag alert threshold")], "keyword"),
    ("why is the search indexer still written in Kotlin?",
     [("ADR-014 keep Kotlin indexer", "keep search-indexer on Kotlin")], "keyword"),
    ("how many times does the notification worker retry failed sends?",
     [("notification-worker", "retries failed sends")], "keyword"),
    ("which currencies does billing support?",
     [("billing-engine", "currency support")], "keyword"),
    ("what language is media-proxy written in?",
     [("media-proxy", "written in Rust")], "keyword"),
    ("which roles exist in the admin portal?",
     [("admin-portal", "roles: viewer, agent")], "keyword"),
    ("when is the weekly sales report emailed to clients?",
     [("report-builder", "weekly sales CSV")], "keyword"),
    ("how are feature flags named?",
     [("feature-flags", "flags are named team.feature")], "keyword"),
    ("how do I use the kill switch for payments?",
     [("feature-flags", "kill switches for checkout and payments")], "keyword"),
    ("why do we self-host Unleash instead of LaunchDarkly?",
     [("ADR-017 self-hosted flags", "instead of paying for LaunchDarkly")], "keyword"),
    ("how long does webhook-relay keep raw payloads?",
     [("webhook-relay", "keeps raw payloads for 14 days")], "keyword"),
    ("when did webhook-relay have an outage because of an expired TLS certificate?",
     [("webhook-relay", "TLS certificate expired")], "keyword"),
    ("how often does inventory-sync pull stock levels from client ERPs?",
     [("inventory-sync", "pulls stock levels")], "keyword"),
    ("how long do the Playwright end-to-end tests take on shop-web?",
     [("shop-web", "Playwright on every pull request")], "keyword"),
    ("which AWS region is our primary region?",
     [("infra-terraform", "eu-west-1 is the primary region")], "keyword"),
    ("where is Terraform state stored?",
     [("infra-terraform", "state is stored in an S3 bucket")], "keyword"),
    ("what is the crash-free sessions target for the mobile app?",
     [("mobile-app", "crash-free sessions target")], "keyword"),
    ("on which day are mobile release builds submitted to the stores?",
     [("mobile-app", "submitted to the stores on Thursdays")], "keyword"),
    ("when is Priya on parental leave?",
     [("Priya Raman", "parental leave")], "keyword"),
    ("what is the SLA uptime for Northwind Grocers?",
     [("Northwind Grocers", "SLA: 99.9% monthly uptime")], "keyword"),
    ("who is the main contact at Bluefin Travel?",
     [("Bluefin Travel", "main contact is their CTO")], "keyword"),
    ("how does Kestrel Logistics pay its invoices?",
     [("Kestrel Logistics", "paid by bank transfer")], "keyword"),
    ("what canary percentage of traffic does a rollout get?",
     [("release process", "canary: 5% of traffic")], "keyword"),
    ("how many approvals does a pull request changing payments need?",
     [("code review policy", "changes to auth or payments need two")], "keyword"),
    ("within how many days must a SEV1 postmortem be written?",
     [("incident process", "blameless postmortem within 5 working days")], "keyword"),
    ("how often is the status page updated during a SEV1?",
     [("incident process", "status page is updated every 30 minutes")], "keyword"),
    ("how long are postgres-main backups kept?",
     [("data retention policy", "backups of postgres-main are kept 35 days")], "keyword"),
    ("what is the max number of PgBouncer client connections?",
     [("postgres-main", "max 400 client connections")], "keyword"),
    ("how many brokers and partitions does the Kafka cluster have?",
     [("kafka-cluster", "3 brokers")], "keyword"),
    ("when is the EKS 1.30 upgrade scheduled?",
     [("eks-prod", "upgrade to EKS 1.30 scheduled"),
      ("EKS 1.30 upgrade", "scheduled for 2026-03-10")], "keyword"),
    ("what is blocking the EKS upgrade?",
     [("EKS 1.30 upgrade", "ingress-nginx")], "keyword"),
    ("how often is staging reset with anonymised data?",
     [("staging environment", "reset with anonymised data")], "keyword"),
    ("what is the Datadog log retention?",
     [("Datadog", "log retention is 15 days")], "keyword"),
    ("how should commit messages be formatted?",
     [("coding conventions", "Conventional Commits")], "keyword"),
    ("which tool formats and type-checks Python code?",
     [("coding conventions", "formatted with ruff")], "keyword"),
    ("where are the QA test accounts for each client kept?",
     [("Ben Carter", "test accounts for every client")], "keyword"),
    ("who maintains the search synonym list?",
     [("Lena Fischer", "maintains the search synonym list")], "keyword"),
    ("what is the p95 of Northwind search on mobile?",
     [("mobile search latency", "p95 of 1.8 s")], "keyword"),
]


def _index():
    ents = {}
    for name, etype, facts in ENTITIES:
        if name in ents:
            raise ValueError("duplicate entity %r" % name)
        if len(set(facts)) != len(facts):
            raise ValueError("duplicate fact in %r" % name)
        ents[name] = (etype, facts)
    for a, b, _ in RELATIONS:
        if a not in ents or b not in ents:
            raise ValueError("relation to unknown entity: %r -> %r" % (a, b))
    return ents


def questions():
    """[{q, kind, expect: [(entity, exact fact text), ...]}] with every fact resolved."""
    ents = _index()
    out = []
    for q, exp, kind in _Q:
        resolved = []
        for ent, sub in exp:
            if ent not in ents:
                raise ValueError("question %r: unknown entity %r" % (q, ent))
            hits = [f for f in ents[ent][1] if sub in f]
            if len(hits) != 1:
                raise ValueError("question %r: %r matches %d facts of %r" % (q, sub, len(hits), ent))
            resolved.append((ent, hits[0]))
        out.append({"q": q, "kind": kind, "expect": resolved})
    return out


def typo_questions():
    """Each keyword question with one slip: the middle two letters of its longest word (6+ letters) swapped."""
    out = []
    for q in questions():
        if q["kind"] != "keyword":
            continue
        words = sorted((w for w in q["q"].replace("?", " ").split() if w.isalpha() and len(w) >= 6),
                       key=lambda w: (-len(w), w))
        if not words:
            continue
        word = words[0]
        mid = len(word) // 2
        slip = word[:mid - 1] + word[mid] + word[mid - 1] + word[mid + 1:]
        out.append({"q": q["q"].replace(word, slip, 1), "kind": "typo", "expect": q["expect"]})
    return out


def stats():
    ents = _index()
    qs = questions()
    return {
        "entities": len(ents),
        "facts": sum(len(f) for _, (_, f) in ents.items()),
        "relations": len(RELATIONS),
        "questions": len(qs),
        "paraphrases": sum(1 for x in qs if x["kind"] == "paraphrase"),
        "max_facts_per_entity": max(len(f) for _, (_, f) in ents.items()),
        "max_fact_chars": max(len(x) for _, (_, f) in ents.items() for x in f),
    }


if __name__ == "__main__":
    print(stats())

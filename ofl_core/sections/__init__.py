"""What each paper-section notebook needs beyond the table layer: its experiments' special
shapes, its figures and its plain-text verdicts — one module per notebook — and the
orchestration only notebooks use: :mod:`~ofl_core.sections.fedcvae_runs` (FedCVAE's runs for
every notebook that has FedCVAE cells) and :mod:`~ofl_core.sections.teacher_regime`
(FedHydra's teacher × regime table)."""

"""What each paper-section notebook needs beyond the table layer: its experiments' special
shapes, its figures and its plain-text verdicts — one module per notebook."""

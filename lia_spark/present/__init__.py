"""What a reader sees: plots, findings, the headline and the HTML report (the only matplotlib importers).
"""

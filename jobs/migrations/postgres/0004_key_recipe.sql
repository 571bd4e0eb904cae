-- kiln why: what each stage attempt's content key was made of (JSON KeyRecipe).
ALTER TABLE stage_attempts ADD COLUMN key_recipe TEXT;

mod report;
